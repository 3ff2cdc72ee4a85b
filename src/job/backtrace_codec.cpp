#include "job/backtrace_codec.hpp"

#include <zlib.h>

#include <array>
#include <nlohmann/json.hpp>

#include "job/raw_json_object.hpp"

namespace kiqd {
namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v =
            (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
    }
    if (i < in.size()) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < in.size()) v |= (unsigned char)in[i + 1] << 8;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    std::array<int, 256> map{};
    map.fill(-1);
    for (int i = 0; i < 64; ++i) map[(unsigned char)kAlphabet[i]] = i;
    std::string out;
    unsigned buf = 0;
    int bits = 0;
    for (char c : in) {
        if (c == '\n' || c == '\r') continue;
        if (c == '=') break;
        int v = map[(unsigned char)c];
        if (v < 0) return std::nullopt;
        buf = buf << 6 | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((buf >> bits) & 0xff);
        }
    }
    return out;
}

std::string encode_backtrace(const std::vector<std::string>& lines) {
    std::string json = "[";
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) json += ',';
        json += json_string(lines[i]);
    }
    json += ']';
    uLongf len = compressBound(json.size());
    std::string compressed(len, '\0');
    compress(reinterpret_cast<Bytef*>(compressed.data()), &len,
             reinterpret_cast<const Bytef*>(json.data()), json.size());
    compressed.resize(len);
    return base64_encode(compressed);
}

std::optional<std::vector<std::string>> decode_backtrace(const std::string& encoded) {
    auto bytes = base64_decode(encoded);
    if (!bytes) return std::nullopt;
    z_stream zs{};
    if (inflateInit(&zs) != Z_OK) return std::nullopt;
    zs.next_in = reinterpret_cast<Bytef*>(bytes->data());
    zs.avail_in = static_cast<uInt>(bytes->size());
    std::string json;
    std::array<char, 4096> chunk{};
    int rc;
    do {
        zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
        zs.avail_out = chunk.size();
        rc = inflate(&zs, Z_NO_FLUSH);
        json.append(chunk.data(), chunk.size() - zs.avail_out);
    } while (rc == Z_OK);
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) return std::nullopt;
    auto parsed = nlohmann::json::parse(json, nullptr, false);
    if (!parsed.is_array()) return std::nullopt;
    std::vector<std::string> lines;
    for (auto& l : parsed)
        if (l.is_string()) lines.push_back(l.get<std::string>());
    return lines;
}

}  // namespace kiqd
