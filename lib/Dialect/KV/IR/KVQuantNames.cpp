//===- KVQuantNames.cpp - #kv.quant's parameters by their ABI names -------===//
//
// A #kv.quant's kind, granularity and mode are the kernel ABI's enums
// (include/kvgen/ABI/Quant.def), read by the names the bundle and kvrt use,
// so that a description, a bundle and kvrt's messages spell each one alike.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Dialect/KV/IR/KVDialect.h"

#include "mlir/IR/DialectImplementation.h"

#include <string>

using namespace mlir;
using namespace kvgen::kv;

/// Parses a keyword (or a string) that is one of `names`, the ABI's names of
/// `Enum` in its order, or else `extra` (which parses to `extraValue`);
/// `what` says what the names are, in the error that lists them.
template <typename Enum, size_t N>
static FailureOr<Enum>
parseABIName(AsmParser &parser, const char *const (&names)[N], StringRef what,
             StringRef extra = "", Enum extraValue = Enum()) {
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  if (failed(parser.parseKeywordOrString(&name)))
    return failure();
  Enum value;
  if (kvgen::abi::parseName(names, name, &value))
    return value;
  if (!extra.empty() && name == extra)
    return extraValue;
  std::string known;
  for (const char *knownName : names)
    known += (known.empty() ? "" : ", ") + std::string(knownName);
  return parser.emitError(loc) << "unknown " << what << " '" << name
                               << "': expected one of " << known;
}

FailureOr<QuantKind> kvgen::kv::parseQuantKind(AsmParser &parser) {
  // int4 is no ABI kind; it is read only for QuantAttr's verifier to say
  // why it is refused.
  return parseABIName<QuantKind>(parser, kvgen::abi::kQuantKindNames,
                                 "quantization kind", "int4", kUnsupportedInt4);
}

FailureOr<ScaleGranularity>
kvgen::kv::parseScaleGranularity(AsmParser &parser) {
  return parseABIName<ScaleGranularity>(parser, kvgen::abi::kGranularityNames,
                                        "scale granularity");
}

FailureOr<ScaleMode> kvgen::kv::parseScaleMode(AsmParser &parser) {
  return parseABIName<ScaleMode>(parser, kvgen::abi::kScaleModeNames,
                                 "scale mode");
}
