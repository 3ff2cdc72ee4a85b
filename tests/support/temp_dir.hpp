#pragma once
// TempDir: a private directory under /tmp for one test's files (configs, scripts, logs), removed
// with everything in it when the object goes away. read_file() reads back what landed there.
#include <string>

namespace kiqd::test {

class TempDir {
  public:
    explicit TempDir(const std::string& prefix = "kiqd-test");  // /tmp/<prefix>-XXXXXX
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    // Writes `text` to the file `name`; returns its path.
    std::string write(const std::string& name, const std::string& text) const;
    // Writes an executable script running `body` with `shell`; returns its path.
    std::string script(const std::string& name, const std::string& body,
                       const std::string& shell = "/bin/sh") const;

  private:
    std::string path_;
};

// The whole content of a file; "" when it cannot be read (not written yet).
std::string read_file(const std::string& path);

// Whether something exists at `path`.
bool file_exists(const std::string& path);

}  // namespace kiqd::test
