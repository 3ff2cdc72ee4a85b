// A shared object without kiqd's entry points: kiqd must refuse it (exit 78, naming it).
extern "C" __attribute__((visibility("default"))) int some_other_library_function() {
    return 1;
}
