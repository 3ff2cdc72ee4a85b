#include "kiqd/job.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <tuple>

#include "job/json_scan.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"

namespace kiqd {
namespace {

const nlohmann::json& empty_array() {
    static const nlohmann::json kEmpty = nlohmann::json::array();
    return kEmpty;
}

// The top-level members whose place in `raw` a Job keeps (Job::member_json): every one that
// kiqd's own middleware and retry path read, so that deciding whether a job uses a feature reads
// a few small members and never the tree of a large payload. Sorted, for the binary search.
// clang-format off
constexpr std::array<std::string_view, 29> kIndexedMembers = {
    "apartment", "args", "at", "backtrace", "class", "dead", "failed_at", "fair_tenant",
    "fair_tenant_queues", "fair_tenant_registered", "jid", "lock", "lock_args", "lock_digest",
    "lock_expiration", "lock_limit", "lock_prefix", "lock_timeout", "lock_ttl", "lock_wait_since",
    "lock_wait_token", "on_conflict", "queue", "retry", "retry_for", "retry_queue",
    "unique_across_queues", "unique_across_workers", "wrapped"};
// clang-format on
static_assert(std::is_sorted(kIndexedMembers.begin(), kIndexedMembers.end()));
static_assert(kIndexedMembers.size() == Job::kIndexedMembers);

// The slot of an indexed member, or -1.
int indexed_slot(std::string_view key) {
    const auto it = std::lower_bound(kIndexedMembers.begin(), kIndexedMembers.end(), key);
    return it != kIndexedMembers.end() && *it == key
               ? static_cast<int>(it - kIndexedMembers.begin())
               : -1;
}

// A member's key as a view: in place when it has no escapes (most keys), else decoded into
// `storage`.
std::string_view decoded_key(std::string_view raw_key, std::string& storage) {
    if (raw_key.size() >= 2 && raw_key.find('\\') == std::string_view::npos)
        return raw_key.substr(1, raw_key.size() - 2);
    storage = json_unquote(raw_key);
    return storage;
}

}  // namespace

void Job::note_member(std::string_view key, size_t offset, size_t size) const {
    if (const int slot = indexed_slot(key); slot >= 0)
        member_index_[static_cast<size_t>(slot)] = {static_cast<std::uint32_t>(offset),
                                                    static_cast<std::uint32_t>(size)};
}

void Job::index_members() const {
    member_index_ = {};
    std::string storage;
    for_each_json_member(raw, [&](std::string_view raw_key, std::string_view raw_value) {
        note_member(decoded_key(raw_key, storage),
                    static_cast<size_t>(raw_value.data() - raw.data()), raw_value.size());
    });
    indexed_ = true;
}

std::optional<std::string_view> Job::member_json(std::string_view key) const {
    const int slot = indexed_slot(key);
    // Offsets are 32-bit: a payload beyond 4 GiB (only with a raised max_payload_bytes) is read
    // by a pass over its top level, as any key outside the index is.
    if (slot < 0 || raw.size() > std::numeric_limits<std::uint32_t>::max())
        return json_member_text(raw, key);
    if (!indexed_) index_members();  // a Job not made by parse_job's fast path
    const MemberSpan& span = member_index_[static_cast<size_t>(slot)];
    if (span.size == 0) return std::nullopt;  // a JSON value is never empty text
    return std::string_view(raw).substr(span.offset, span.size);
}

std::optional<nlohmann::json> Job::member(std::string_view key) const {
    const auto text = member_json(key);
    if (!text) return std::nullopt;
    return nlohmann::json::parse(*text);
}

nlohmann::json Job::members(std::initializer_list<std::string_view> keys) const {
    nlohmann::json object = nlohmann::json::object();
    for (const auto key : keys)
        if (auto value = member(key)) object[std::string(key)] = std::move(*value);
    return object;
}

std::optional<std::string_view> Job::arg_json(size_t i) const {
    const auto args = member_json("args");
    return args ? json_element_text(*args, i) : std::nullopt;
}

const nlohmann::json& Job::payload() const {
    // parse_job checked the text, so this parse cannot fail on a Job it made.
    if (!payload_) payload_ = raw.empty() ? nlohmann::json::object() : nlohmann::json::parse(raw);
    return *payload_;
}

const nlohmann::json& Job::args() const {
    const auto& p = payload();
    auto it = p.find("args");
    return it != p.end() && it->is_array() ? *it : empty_array();
}

const nlohmann::json* Job::active_job_arguments() const {
    const auto& a = args();
    if (wrapped.empty() || a.empty() || !a[0].is_object()) return nullptr;
    auto it = a[0].find("arguments");
    return it != a[0].end() && it->is_array() ? &*it : nullptr;
}

// The one pass of parse_job: nlohmann's SAX interface, checking the whole text and keeping only
// the top-level members a job needs. Duplicate members: the last wins, as in nlohmann's tree.
class JobFieldReader {
  public:
    explicit JobFieldReader(Job& job) : job_(job) {}

    // After sax_parse: why the payload cannot be run, or nullopt (and then the job's string
    // fields are filled in).
    std::optional<InvalidJob> verdict(bool parsed) {
        if (!parsed) return InvalidJob{"JSON::ParserError", parse_error_};
        if (!is_object_) return InvalidJob{"Kiqd::InvalidJob", "payload is not a JSON object"};
        for (auto [name, text, required] :
             {std::tuple<const char*, Text*, bool>{"class", &class_, true},
              {"wrapped", &wrapped_, false},
              {"jid", &jid_, false}}) {
            if (!text->present) {
                if (required)
                    return InvalidJob{"Kiqd::InvalidJob", std::string("missing \"") + name + "\""};
            } else if (!text->is_string) {
                return InvalidJob{"Kiqd::InvalidJob",
                                  std::string("\"") + name + "\" is not a string"};
            }
        }
        if (class_.value.empty()) return InvalidJob{"Kiqd::InvalidJob", "\"class\" is empty"};
        if (args_bad_) return InvalidJob{"Kiqd::InvalidJob", "\"args\" is not an array"};
        job_.job_class = std::move(class_.value);
        job_.wrapped = std::move(wrapped_.value);
        job_.jid = std::move(jid_.value);
        return std::nullopt;
    }

    // The SAX interface (nlohmann::json_sax).
    bool null() { return value(Kind::other); }
    bool boolean(bool) { return value(Kind::other); }
    bool number_integer(std::int64_t v) { return number(static_cast<double>(v), true, v); }
    bool number_unsigned(std::uint64_t v) {
        std::optional<long long> exact;
        if (v <= static_cast<std::uint64_t>(std::numeric_limits<long long>::max()))
            exact = static_cast<long long>(v);
        return number(static_cast<double>(v), true, exact);
    }
    bool number_float(double v, const std::string&) { return number(v, false, std::nullopt); }
    bool string(std::string& v) {
        value(Kind::string);
        if (depth_ != 1) return true;
        switch (member_) {
            case Member::job_class:
                class_.value = std::move(v);
                break;
            case Member::wrapped:
                wrapped_.value = std::move(v);
                break;
            case Member::jid:
                jid_.value = std::move(v);
                break;
            case Member::display_class:
                job_.display_class_ = std::move(v);
                break;
            default:
                break;
        }
        return true;
    }
    bool binary(nlohmann::json::binary_t&) { return value(Kind::other); }
    bool start_object(std::size_t) {
        if (depth_ == 0)
            is_object_ = true;
        else
            value(Kind::other);
        ++depth_;
        return true;
    }
    bool start_array(std::size_t) {
        value(Kind::array);
        ++depth_;
        return true;
    }
    bool end_object() { return --depth_, true; }
    bool end_array() { return --depth_, true; }
    bool key(std::string& k) { return key_view(k); }
    bool key_view(std::string_view k) {
        if (depth_ == 1) member_ = member_of(k);
        return true;
    }
    // Whether the value of the current top-level member is kept when it is a string.
    bool wants_text() const {
        return member_ == Member::job_class || member_ == Member::wrapped ||
               member_ == Member::jid || member_ == Member::display_class;
    }
    // The value of the current top-level member, from its raw token (the fast path: json_scan
    // checked the whole text, so the token is valid JSON).
    void token(std::string_view t) {
        if (member_ == Member::other) return;  // a member no job field comes from: nothing to read
        switch (t.front()) {
            case '"':
                if (wants_text()) {
                    std::string text = json_unquote(t);
                    string(text);
                } else {
                    value(Kind::string);
                }
                return;
            case '{':
                value(Kind::other);
                return;
            case '[':
                value(Kind::array);
                return;
            case 't':
            case 'f':
            case 'n':
                value(Kind::other);
                return;
            default:
                number_token(t);
        }
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
        parse_error_ = e.what();
        return false;
    }

  private:
    enum class Kind { string, array, number, other };
    enum class Member {
        other,
        job_class,
        wrapped,
        jid,
        display_class,
        args,
        enqueued_at,
        retry_count
    };
    struct Text {
        bool present = false;
        bool is_string = false;
        std::string value;
    };

    // As nlohmann's lexer types a number: an integer token that fits is signed (with a minus)
    // or unsigned, anything else a double.
    void number_token(std::string_view t) {
        const char* first = t.data();
        const char* last = first + t.size();
        if (t.find_first_of(".eE") == std::string_view::npos) {
            if (t.front() == '-') {
                std::int64_t v;
                if (std::from_chars(first, last, v).ec == std::errc()) {
                    number_integer(v);
                    return;
                }
            } else {
                std::uint64_t v;
                if (std::from_chars(first, last, v).ec == std::errc()) {
                    number_unsigned(v);
                    return;
                }
            }
        }
        double d = 0;
        std::from_chars(first, last, d);
        number_float(d, {});
    }

    static Member member_of(std::string_view k) {
        if (k == "class") return Member::job_class;
        if (k == "wrapped") return Member::wrapped;
        if (k == "jid") return Member::jid;
        if (k == "display_class") return Member::display_class;
        if (k == "args") return Member::args;
        if (k == "enqueued_at") return Member::enqueued_at;
        if (k == "retry_count") return Member::retry_count;
        return Member::other;
    }

    // A value begins. Only members of the top-level object matter; a later duplicate replaces
    // what an earlier one said.
    bool value(Kind kind) {
        if (depth_ != 1) return true;
        auto text = [&](Text& t) {
            t.present = true;
            t.is_string = kind == Kind::string;
            t.value.clear();
        };
        switch (member_) {
            case Member::job_class:
                text(class_);
                break;
            case Member::wrapped:
                text(wrapped_);
                break;
            case Member::jid:
                text(jid_);
                break;
            case Member::display_class:
                job_.display_class_.clear();
                break;
            case Member::args:
                args_bad_ = kind != Kind::array;
                break;
            case Member::enqueued_at:
                job_.enqueued_at_.reset();
                break;
            case Member::retry_count:
                job_.retry_count_.reset();
                break;
            case Member::other:
                break;
        }
        return true;
    }
    bool number(double v, bool integer, std::optional<long long> exact) {
        value(Kind::number);
        if (depth_ != 1) return true;
        if (member_ == Member::enqueued_at) job_.enqueued_at_ = timestamp_seconds(v, integer);
        if (member_ == Member::retry_count && integer) job_.retry_count_ = exact;
        return true;
    }

    Job& job_;
    int depth_ = 0;
    Member member_ = Member::other;
    bool is_object_ = false;
    bool args_bad_ = false;
    Text class_, wrapped_, jid_;
    std::string parse_error_;
};

// Feeds json_scan's top-level members to a JobFieldReader as if its SAX parser had read them,
// and notes where in the text the members Job::member_json reads are.
class ScannedMembers final : public JsonMemberVisitor {
  public:
    ScannedMembers(JobFieldReader& reader, const Job& job, std::string_view text)
        : reader_(reader), job_(job), text_(text) {
        reader_.start_object(0);
    }
    void member(std::string_view key, std::string_view value) override {
        const std::string_view name = decoded_key(key, storage_);  // no escapes: no copy
        reader_.key_view(name);
        reader_.token(value);
        job_.note_member(name, static_cast<size_t>(value.data() - text_.data()), value.size());
    }

  private:
    JobFieldReader& reader_;
    const Job& job_;
    std::string_view text_;
    std::string storage_;
};

std::variant<Job, InvalidJob> parse_job(std::string raw, std::string queue,
                                        const JobLimits& limits) {
    if (raw.size() > limits.max_payload_bytes)
        return InvalidJob{"Kiqd::PayloadTooLarge",
                          "payload of " + std::to_string(raw.size()) + " bytes exceeds the " +
                              std::to_string(limits.max_payload_bytes) + "-byte limit"};
    Job job;
    std::optional<InvalidJob> invalid;
    bool scanned = false;
    {
        JobFieldReader reader(job);
        ScannedMembers members(reader, job, raw);
        const auto scan = json_scan(raw, &members, limits.max_nesting_depth);
        scanned = scan.valid && scan.is_object;
        job.indexed_ = scanned;
        if (scanned) invalid = reader.verdict(true);
    }
    if (!scanned) {
        // Refused by the fast path, or not an object: the checks kiqd made before it decide,
        // and their messages (nlohmann's own, for bad JSON) are the reason.
        job = Job{};
        if (json_nesting_depth(raw) > limits.max_nesting_depth)
            return InvalidJob{"Kiqd::InvalidJob", "payload nests deeper than " +
                                                      std::to_string(limits.max_nesting_depth) +
                                                      " levels"};
        if (auto lenient = nlohmann_leniency(raw)) return InvalidJob{"JSON::ParserError", *lenient};
        JobFieldReader reader(job);
        invalid = reader.verdict(nlohmann::json::sax_parse(raw, &reader));
    }
    if (invalid) return *invalid;
    job.raw = std::move(raw);
    job.queue = std::move(queue);
    return job;
}

}  // namespace kiqd
