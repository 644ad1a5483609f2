#include "state_dict/pickle_vocabulary.h"

#include "state_dict/element_type.h"

namespace ddp::detail::pickle {

bool allowed_global(std::string_view name) {
  for (auto known : {kOrderedDict, kRebuildTensorV2, kRebuildTensor, kRebuildParameter, kRebuildParameterWithState,
                     kSize, kEncode}) {
    if (name == known) return true;
  }
  return name.substr(0, 6) == "torch." && weights::from_storage_class(name.substr(6)).has_value();
}

const char* opcode_name(char op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'N': return "NONE";
    case '\x88': return "NEWTRUE";
    case '\x89': return "NEWFALSE";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'M': return "BININT2";
    case '\x8a': return "LONG1";
    case '\x8b': return "LONG4";
    case 'G': return "BINFLOAT";
    case 'X': return "BINUNICODE";
    case '\x8c': return "SHORT_BINUNICODE";
    case '\x8d': return "BINUNICODE8";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case '\x8e': return "BINBYTES8";
    case '\x96': return "BYTEARRAY8";
    case ')': return "EMPTY_TUPLE";
    case 't': return "TUPLE";
    case '\x85': return "TUPLE1";
    case '\x86': return "TUPLE2";
    case '\x87': return "TUPLE3";
    case ']': return "EMPTY_LIST";
    case 'l': return "LIST";
    case 'a': return "APPEND";
    case 'e': return "APPENDS";
    case '}': return "EMPTY_DICT";
    case 'd': return "DICT";
    case 's': return "SETITEM";
    case 'u': return "SETITEMS";
    case 'c': return "GLOBAL";
    case '\x93': return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'Q': return "BINPERSID";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case '\x94': return "MEMOIZE";
    case 'h': return "BINGET";
    case 'j': return "LONG_BINGET";
    case '\x80': return "PROTO";
    case '\x95': return "FRAME";
    // Known to pickle, refused here.
    case 'i': return "INST";
    case 'o': return "OBJ";
    case '\x81': return "NEWOBJ";
    case '\x92': return "NEWOBJ_EX";
    case '\x82': return "EXT1";
    case '\x83': return "EXT2";
    case '\x84': return "EXT4";
    case 'P': return "PERSID";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'p': return "PUT";
    case 'g': return "GET";
    case '\x8f': return "EMPTY_SET";
    case '\x90': return "ADDITEMS";
    case '\x91': return "FROZENSET";
    case '\x97': return "NEXT_BUFFER";
    case '\x98': return "READONLY_BUFFER";
    default: return nullptr;
  }
}

}  // namespace ddp::detail::pickle
