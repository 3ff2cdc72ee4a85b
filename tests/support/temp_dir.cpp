#include "support/temp_dir.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kiqd::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
}

TempDir::~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

std::string TempDir::script(const std::string& name, const std::string& body,
                            const std::string& shell) const {
    const std::string p = write(name, "#!" + shell + "\n" + body + "\n");
    fs::permissions(p, fs::perms::owner_all);
    return p;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

bool file_exists(const std::string& path) {
    return ::access(path.c_str(), F_OK) == 0;
}

}  // namespace kiqd::test
