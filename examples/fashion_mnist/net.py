"""The example's network in Python, net.h's twin: the same layers under the same names, so that
the weights the example writes load into it, and weights trained here load into the example.

    import sys; sys.path.insert(0, "examples/fashion_mnist"); import torch; from net import Net
    model = Net(); model.load_state_dict(torch.load("runs/<run>/model.pt", weights_only=True))
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """[N, 1, 28, 28] normalized images -> [N, 10] logits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 64)
        self.dropout = nn.Dropout(0.25)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # 32 x 14 x 14
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)  # 64 x 7 x 7
        return self.fc2(self.dropout(F.relu(self.fc1(x.flatten(1)))))
