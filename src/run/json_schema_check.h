// The JSON Schema keywords xgrammar would silently leave unenforced: GrammarCompiler::json_schema() refuses a
// schema that has one, naming it, rather than constrain the output to a larger language than the schema's
// (docs/structured-output.md lists them). xgrammar's converter reads, at each subschema, the first of `$ref`,
// `const`, `enum`, `anyOf`, `oneOf`, `allOf` present and nothing beside it; else the keywords of the
// subschema's `type` (or of the type that `properties` or `items` imply); else it allows any value. It does
// not read `not`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `contains`, `uniqueItems` or
// `$dynamicRef` at all. (What it drops with a warning, such as multipleOf on a number, xgrammar_log.h
// collects.)
#pragma once

#include <string>
#include <string_view>

namespace minigpt {

// `schema` (JSON text): "" when xgrammar reads every validation keyword it has; else one line naming the
// first keyword it would ignore and where (a JSON Pointer), e.g. "\"uniqueItems\" at /properties/tags is not
// supported". Text that is not JSON gives "" (xgrammar's parser says what is wrong with it).
std::string unenforced_keyword(std::string_view schema);

}  // namespace minigpt
