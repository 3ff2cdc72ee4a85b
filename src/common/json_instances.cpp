// The definitions of the instantiations json_instances.hpp lists.
#include "common/json_instances.hpp"

#ifdef KIQD_JSON_INSTANCES_KNOWN
KIQD_JSON_INSTANCES(template)
#endif
