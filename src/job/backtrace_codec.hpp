#pragma once
// Sidekiq's error_backtrace encoding (docs/data-model.md#backtrace-encoding): strict Base64 of the
// zlib (RFC 1950) compression of a JSON array of lines. Readable by Sidekiq 6.x, 7.x and 8.x.
#include <optional>
#include <string>
#include <vector>

namespace kiqd {

std::string encode_backtrace(const std::vector<std::string>& lines);
// Accepts strict or MIME (newline-wrapped) Base64; nullopt when the text is not an encoded
// backtrace.
std::optional<std::vector<std::string>> decode_backtrace(const std::string& encoded);

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);  // skips '\n' and '\r'

}  // namespace kiqd
