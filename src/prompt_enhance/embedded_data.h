// Text files of src/prompt_enhance/data/, compiled in by CMake
// (prompt_enhance_data.cpp in the build tree; see src/CMakeLists.txt).
#pragma once

#include <string_view>

namespace magi2::pe::data {

extern const std::string_view t2v_md;                 ///< built-in T2V request template
extern const std::string_view i2v_md;                 ///< built-in I2V request template
extern const std::string_view response_schemas_json;  ///< {"t2v": schema, "i2v": schema}

}  // namespace magi2::pe::data
