#pragma once
// ScopedEnv: sets an environment variable for the scope and unsets it at scope exit.
#include <stdlib.h>

#include <string>

namespace kiqd::test {

struct ScopedEnv {
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        ::setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() { ::unsetenv(name_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    const char* name_;
};

}  // namespace kiqd::test
