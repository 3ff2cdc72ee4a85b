#pragma once
// The nlohmann::json parsers and serializers kiqd uses, compiled once (json_instances.cpp)
// instead of in every file that parses or dumps JSON. precompiled.hpp declares them
// `extern template` for every file of kiqd_core and the test suites, which then call these
// copies; without the precompiled header each file compiles its own again, as nlohmann/json
// does by default. Only the build's cost changes: the code is the same.
//
// They are instantiations of nlohmann/json's internal classes, whose names are those of 3.11
// (Debian 12 has 3.11.2): with another version the list is left out and every file compiles
// its own copies again.
#include <nlohmann/json.hpp>
#include <string>

#if NLOHMANN_JSON_VERSION_MAJOR == 3 && NLOHMANN_JSON_VERSION_MINOR == 11
#define KIQD_JSON_INSTANCES_KNOWN 1

// The lexer and parser of documents of type J read from iterators of type It, with the two
// parse loops the parser's parse() calls (building the tree with or without a callback).
#define KIQD_JSON_PARSER(how, J, It)                                                               \
    how class nlohmann::detail::lexer<J, nlohmann::detail::iterator_input_adapter<It>>;            \
    how class nlohmann::detail::parser<J, nlohmann::detail::iterator_input_adapter<It>>;           \
    how bool                                                                                       \
    nlohmann::detail::parser<J, nlohmann::detail::iterator_input_adapter<It>>::sax_parse_internal( \
        nlohmann::detail::json_sax_dom_parser<J>*);                                                \
    how bool                                                                                       \
    nlohmann::detail::parser<J, nlohmann::detail::iterator_input_adapter<It>>::sax_parse_internal( \
        nlohmann::detail::json_sax_dom_callback_parser<J>*);

// `how` is `template` (the definitions, in json_instances.cpp) or `extern template` (the
// declarations). parse() of a std::string reads string iterators; of a std::string_view or a
// char pointer, char pointers.
#define KIQD_JSON_INSTANCES(how)                                               \
    KIQD_JSON_PARSER(how, nlohmann::json, const char*)                         \
    KIQD_JSON_PARSER(how, nlohmann::json, std::string::const_iterator)         \
    KIQD_JSON_PARSER(how, nlohmann::ordered_json, std::string::const_iterator) \
    how class nlohmann::detail::serializer<nlohmann::json>;                    \
    how class nlohmann::detail::serializer<nlohmann::ordered_json>;
#endif
