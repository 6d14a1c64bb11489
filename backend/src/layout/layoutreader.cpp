// SPDX-License-Identifier: MIT
// A SAX handler over nlohmann's parser: no JSON tree for the params (its std::map objects cost
// more than the parse itself), each param's fields typed as they arrive.
#include "layout/layoutreader.h"

#include <climits>
#include <optional>

namespace shardscope::detail {

namespace {

using nlohmann::json;

// Where the parser is. Top is the top-level object; Dom, a container under it other than params
// (built as JSON); Skip, a value under a param that no field reads.
enum class Frame : uint8_t { Top, Dom, Params, Param, Shape, Fusion, Sections, Section, Skip };

struct Level
{
    Frame frame;
    std::string member; ///< an object's current key
};

class Reader : public nlohmann::json_sax<json>
{
public:
    explicit Reader(const std::string &origin)
        : m_origin(origin)
    {}

    ScannedLayout result;
    std::optional<Error> error;

    bool null() override { return scalar(json()); }
    bool boolean(bool v) override { return scalar(json(v)); }
    bool number_integer(number_integer_t v) override
    {
        if (v > kMax || v < -kMax)
            return fail(numberKey(), json(v).dump() + " is beyond any model's size (2^40)");
        return scalar(json(v));
    }
    bool number_unsigned(number_unsigned_t v) override
    {
        if (v > number_unsigned_t(kMax))
            return fail(numberKey(), json(v).dump() + " is beyond any model's size (2^40)");
        return scalar(json(v));
    }
    // A float cast to an integer is undefined (nlohmann's conversions do it): a layout has none.
    bool number_float(number_float_t v, const string_t &) override
    {
        return fail(numberKey(), json(v).dump() + " where a layout has integers");
    }
    bool string(string_t &v) override { return scalar(json(std::move(v))); }
    bool binary(binary_t &) override { return fail({}, "binary data in a layout"); }

    bool key(string_t &k) override
    {
        m_levels.back().member = std::move(k);
        return true;
    }

    bool start_object(std::size_t) override { return open(true); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }

    bool parse_error(std::size_t position, const std::string &,
                     const nlohmann::detail::exception &e) override
    {
        // A number beyond double's range arrives as out_of_range (406), not as a parse error.
        const bool syntax = dynamic_cast<const json::parse_error *>(&e) != nullptr;
        error = makeError(Error::Code::Format,
                          (syntax ? "not JSON: " : "not a layout: ") + std::string(e.what()))
                    .inFile(m_origin)
                    .atOffset(position > 0 ? position - 1 : 0);
        return false;
    }

private:
    static constexpr int64_t kMax = int64_t(1) << 40;

    bool fail(const std::string &key, const std::string &msg)
    {
        if (!error) {
            error = makeError(Error::Code::Format, msg).inFile(m_origin);
            if (!key.empty())
                error->atKey(key);
        }
        return false;
    }

    // The key a number sits under: the nearest object member (an array's elements share its).
    std::string numberKey() const
    {
        for (auto it = m_levels.rbegin(); it != m_levels.rend(); ++it)
            if (!it->member.empty())
                return it->member;
        return {};
    }

    ScannedParam &param() { return result.params.back(); }
    Fusion &fusion() { return *param().param.fusion; }

    std::string paramKey() const
    {
        return "params[" + std::to_string(result.params.size() - 1) + "]";
    }
    std::string sectionKey() const
    {
        const size_t n = result.params.back().param.fusion->sections.size();
        return paramKey() + ".fusion.sections[" + std::to_string(n - 1) + "]";
    }
    // The field being read, under a param, its fusion or one of its sections.
    std::string fieldKey() const
    {
        const Level &l = m_levels.back();
        const std::string where = l.frame == Frame::Fusion    ? paramKey() + ".fusion"
                                  : l.frame == Frame::Section ? sectionKey()
                                                              : paramKey();
        return where + "." + l.member;
    }
    bool wrongType(const char *what) { return fail(fieldKey(), std::string("must be ") + what); }

    static std::optional<int> toInt(const json &v)
    {
        if (!v.is_number_integer())
            return std::nullopt;
        const int64_t i = v.get<int64_t>(); // checked against 2^40 already
        if (i < INT_MIN || i > INT_MAX)
            return std::nullopt;
        return int(i);
    }

    // Into the DOM container on top of m_dom: an array's next element or an object's member.
    json &domSlot()
    {
        json &c = *m_dom.back();
        if (c.is_array()) {
            c.push_back(json());
            return c.back();
        }
        return c[m_levels.back().member];
    }

    bool scalar(json v)
    {
        if (m_levels.empty())
            return fail({}, "not a JSON object");
        Level &l = m_levels.back();
        switch (l.frame) {
        case Frame::Top:
            if (l.member == "params")
                return fail("params", "no params array");
            result.top[l.member] = std::move(v);
            return true;
        case Frame::Dom:
            domSlot() = std::move(v);
            return true;
        case Frame::Params:
            result.params.emplace_back();
            return fail(paramKey(), "a param needs name and shape");
        case Frame::Param:
            return paramField(l.member, std::move(v));
        case Frame::Shape:
            if (!v.is_number_integer())
                return fail(paramKey() + ".shape", "must be an array of integers");
            param().param.shape.push_back(v.get<int64_t>());
            return true;
        case Frame::Fusion:
            return fusionField(l.member, std::move(v));
        case Frame::Sections:
            fusion().sections.emplace_back();
            return fail(sectionKey(), "must be an object");
        case Frame::Section:
            return sectionField(l.member, std::move(v));
        case Frame::Skip:
            return true;
        }
        return true;
    }

    bool paramField(const std::string &k, json v)
    {
        ScannedParam &s = param();
        LayoutParam &p = s.param;
        if (k == "name" || k == "dtype" || k == "absorbs") {
            if (!v.is_string())
                return wrongType("a string");
            std::string &to = k == "name" ? p.name : k == "dtype" ? p.dtype : p.absorbs;
            to = std::move(v.get_ref<std::string &>());
            s.hasName |= k == "name";
        } else if (k == "tp_dim" || k == "expert") {
            const auto i = toInt(v);
            if (!i)
                return wrongType("an integer");
            (k == "tp_dim" ? p.tpDim : p.expert) = *i;
        } else if (k == "optimizer_state") {
            if (!v.is_boolean())
                return wrongType("true or false");
            p.hasOptimizerState = v.get<bool>();
        } else if (k == "shape") {
            return wrongType("an array of integers");
        } else if (k == "fusion") {
            return wrongType("an object");
        }
        return true; // a field no version reads
    }

    bool fusionField(const std::string &k, json v)
    {
        Fusion &f = fusion();
        if (k == "rule") {
            if (!v.is_string())
                return wrongType("a string");
            f.rule = std::move(v.get_ref<std::string &>());
        } else if (k == "dim") {
            const auto i = toInt(v);
            if (!i)
                return wrongType("an integer");
            f.dim = *i;
        } else if (k == "tp_interleaved" || k == "tp_local") {
            if (!v.is_boolean())
                return wrongType("true or false");
            (k == "tp_local" ? f.tpLocal : f.tpInterleaved) = v.get<bool>();
        } else if (k == "sections") {
            return wrongType("an array of objects");
        }
        return true;
    }

    bool sectionField(const std::string &k, json v)
    {
        FusedSection &sec = fusion().sections.back();
        if (k == "name") {
            if (!v.is_string())
                return wrongType("a string");
            sec.name = std::move(v.get_ref<std::string &>());
        } else if (k == "size") {
            if (!v.is_number_integer())
                return wrongType("an integer");
            sec.size = v.get<int64_t>();
        }
        return true;
    }

    bool open(bool object)
    {
        if (m_levels.empty()) {
            if (!object)
                return fail({}, "not a JSON object");
            m_levels.push_back({Frame::Top, {}});
            return true;
        }
        Level &l = m_levels.back();
        const std::string &k = l.member;
        Frame next = Frame::Skip;
        switch (l.frame) {
        case Frame::Top:
            if (k == "params") {
                if (object)
                    return fail("params", "no params array");
                result.hasParams = true;
                result.params.clear(); // a repeated key: the last one counts, as in a JSON tree
                next = Frame::Params;
                break;
            }
            result.top[k] = object ? json::object() : json::array();
            m_dom.push_back(&result.top[k]);
            next = Frame::Dom;
            break;
        case Frame::Dom: {
            json &slot = domSlot();
            slot = object ? json::object() : json::array();
            m_dom.push_back(&slot);
            next = Frame::Dom;
            break;
        }
        case Frame::Params:
            result.params.emplace_back();
            result.params.back().param.dtype = "float32";
            if (!object)
                return fail(paramKey(), "a param needs name and shape");
            next = Frame::Param;
            break;
        case Frame::Param:
            if (k == "shape" && !object) {
                param().param.shape.clear();
                param().hasShape = true;
                next = Frame::Shape;
            } else if (k == "fusion" && object) {
                param().param.fusion.emplace();
                next = Frame::Fusion;
            } else if (k == "shape" || k == "fusion" || k == "name" || k == "dtype" ||
                       k == "absorbs" || k == "tp_dim" || k == "expert" || k == "optimizer_state") {
                return paramField(k, object ? json::object() : json::array());
            }
            break;
        case Frame::Shape:
            return fail(paramKey() + ".shape", "must be an array of integers");
        case Frame::Fusion:
            if (k == "sections" && !object) {
                fusion().sections.clear();
                next = Frame::Sections;
            } else if (k == "rule" || k == "dim" || k == "tp_interleaved" || k == "tp_local" ||
                       k == "sections") {
                return fusionField(k, object ? json::object() : json::array());
            }
            break;
        case Frame::Sections:
            fusion().sections.emplace_back();
            if (!object)
                return fail(sectionKey(), "must be an object");
            next = Frame::Section;
            break;
        case Frame::Section:
            if (k == "name" || k == "size")
                return sectionField(k, json::object());
            break;
        case Frame::Skip:
            break;
        }
        m_levels.push_back({next, {}});
        return true;
    }

    bool close()
    {
        if (m_levels.back().frame == Frame::Dom)
            m_dom.pop_back();
        m_levels.pop_back();
        return true;
    }

    const std::string &m_origin;
    std::vector<Level> m_levels;
    std::vector<json *> m_dom; ///< the open containers under Top, innermost last
};

} // namespace

Result<ScannedLayout> scanLayoutJson(const std::string &text, const std::string &origin)
{
    Reader reader(origin);
    if (!json::sax_parse(text, &reader)) {
        if (reader.error)
            return *reader.error;
        return makeError(Error::Code::Format, "not JSON").inFile(origin);
    }
    return std::move(reader.result);
}

} // namespace shardscope::detail
