# ddp's cache outside the checkout, where scripts/upstream_torch.sh and scripts/private_gloo.sh put
# what they fetch: $DDP_CACHE, else $XDG_CACHE_HOME/ddp, else ~/.cache/ddp (as the scripts say).
function(ddp_cache_dir out)
  if(DEFINED ENV{DDP_CACHE})
    set(${out} "$ENV{DDP_CACHE}" PARENT_SCOPE)
  elseif(DEFINED ENV{XDG_CACHE_HOME})
    set(${out} "$ENV{XDG_CACHE_HOME}/ddp" PARENT_SCOPE)
  else()
    set(${out} "$ENV{HOME}/.cache/ddp" PARENT_SCOPE)
  endif()
endfunction()
