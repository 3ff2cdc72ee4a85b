// The stock kiqd binary: the built-in handlers only (custom binaries call kiqd::run themselves).
#include "kiqd/kiqd.hpp"

int main(int argc, char** argv) {
    return kiqd::run(argc, argv);
}
