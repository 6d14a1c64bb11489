// SPDX-License-Identifier: MIT
#include "fix/statedictwriter.h"

#include "common/regularfile.h"
#include "fix/picklescan.h"
#include "fix/rewrite.h"
#include "fix/tensorarchive.h"
#include "shardscope/tensor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

Error ioError(const std::string &path, const std::string &what, int err)
{
    return makeError(Error::Code::Io, what + ": " + std::strerror(err)).inFile(path);
}

// A tensor's bytes: a byte range of a source file, or assembled in memory.
struct TensorBytes
{
    uint32_t file = 0;
    uint64_t offset = 0, length = 0;
    bool inFile = false;
    std::vector<std::byte> data;
};

class Writer
{
public:
    Writer(const CheckpointIndex &fixed, const FixPlan &plan, const std::string &dir)
        : m_fixed(fixed)
        , m_dir(dir)
    {
        for (const Rewrite &r : plan.rewrites)
            m_rewrites.emplace(plan.firstNew + r.tensor, &r);
    }
    ~Writer()
    {
        for (auto &[file, fd] : m_fds)
            ::close(fd);
    }

    // The file a tensor belongs to: its data's (a rewritten key: its first piece's).
    uint32_t fileOf(size_t i) const
    {
        const TensorEntry *t = &m_fixed.tensors[i];
        if (auto it = m_rewrites.find(i); it != m_rewrites.end() && !it->second->pieces.empty())
            t = &it->second->pieces.front().stored;
        // A tensor without chunks (nothing stored: an empty one) goes in the first file.
        return t->chunks.empty() ? 0 : t->chunks.front().file;
    }

    Result<TensorBytes> bytesOf(size_t i)
    {
        const TensorEntry &t = m_fixed.tensors[i];
        TensorBytes b;
        if (auto it = m_rewrites.find(i); it != m_rewrites.end()) {
            auto data = assembleRewrite(m_fixed, t, *it->second);
            if (!data)
                return data.error();
            b.data = std::move(*data);
            return b;
        }
        const uint64_t es = uint64_t(elementSize(t.dtype)), n = uint64_t(t.numel()) * es;
        if (t.chunks.size() == 1 && t.chunks.front().encoding == Encoding::RawStorage &&
            t.chunks.front().transforms == 0 && contiguous(t)) {
            const Location &loc = t.chunks.front();
            const uint64_t at = uint64_t(t.storageOffset) * es;
            if (at <= loc.length && n <= loc.length - at) {
                b.inFile = true;
                b.file = loc.file;
                b.offset = loc.offset + at;
                b.length = n;
                return b;
            }
        }
        auto read = readTensor(m_fixed, t);
        if (!read)
            return read.error();
        b.data = std::move(read->bytes);
        return b;
    }

    Status put(int fd, const std::string &path, TensorBytes &b, uint64_t &at)
    {
        if (!b.inFile) {
            m_written += b.data.size();
            return writeAt(fd, path, b.data.data(), b.data.size(), at);
        }
        auto in = sourceFd(b.file);
        if (!in)
            return in.error();
        loff_t from = loff_t(b.offset), to = loff_t(at);
        for (uint64_t left = b.length; left > 0;) {
            const ssize_t n = m_kernelCopy ? ::copy_file_range(*in, &from, fd, &to, left, 0) : -1;
            if (n < 0 && errno == EINTR && m_kernelCopy)
                continue;
            if (n < 0 && (!m_kernelCopy || errno == EXDEV || errno == EOPNOTSUPP ||
                          errno == ENOSYS || errno == EINVAL)) {
                // Across filesystems (before Linux 5.3 and since 5.19), or a filesystem
                // without it: through memory.
                m_kernelCopy = false;
                if (Status st = copyThrough(*in, uint64_t(from), fd, uint64_t(to), left, path); !st)
                    return st;
                break;
            }
            if (n <= 0)
                return ioError(path, "cannot copy from " + m_fixed.files[b.file],
                               n < 0 ? errno : EIO);
            left -= uint64_t(n);
        }
        at += b.length;
        m_written += b.length;
        return Ok{};
    }

    // The bytes a range of a source file holds (a torch.save record needs its CRC up front).
    Result<uint32_t> crcOf(const TensorBytes &b)
    {
        if (!b.inFile)
            return crc32(b.data);
        auto in = sourceFd(b.file);
        if (!in)
            return in.error();
        std::vector<std::byte> buf(size_t(1) << 22);
        uint32_t crc = 0;
        for (uint64_t done = 0; done < b.length;) {
            const size_t want = size_t(std::min<uint64_t>(buf.size(), b.length - done));
            const ssize_t n = ::pread(*in, buf.data(), want, off_t(b.offset + done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return ioError(m_fixed.files[b.file], "cannot read", n < 0 ? errno : EIO);
            crc = crc32(std::span(buf.data(), size_t(n)), crc);
            done += uint64_t(n);
        }
        return crc;
    }

    Status copyThrough(int in, uint64_t from, int out, uint64_t to, uint64_t left,
                       const std::string &path)
    {
        std::vector<char> buf(size_t(std::min<uint64_t>(left, uint64_t(1) << 24)));
        while (left > 0) {
            const ssize_t n =
                ::pread(in, buf.data(), size_t(std::min<uint64_t>(left, buf.size())), off_t(from));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return ioError(path, "cannot read its source", n < 0 ? errno : EIO);
            if (Status st = writeAt(out, path, buf.data(), size_t(n), to); !st)
                return st;
            from += uint64_t(n);
            left -= uint64_t(n);
        }
        return Ok{};
    }

    static Status writeAt(int fd, const std::string &path, const void *p, size_t n, uint64_t &at)
    {
        const auto *c = static_cast<const char *>(p);
        for (size_t done = 0; done < n;) {
            const ssize_t w = ::pwrite(fd, c + done, n - done, off_t(at + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return ioError(path, "cannot write", w < 0 ? errno : EIO);
            done += size_t(w);
        }
        at += n;
        return Ok{};
    }

    uint64_t written() const { return m_written; }

private:
    static bool contiguous(const TensorEntry &t)
    {
        int64_t expect = 1;
        for (size_t d = t.ndim(); d-- > 0;) {
            if (t.shape[d] != 1 && d < t.strides.size() && t.strides[d] != expect)
                return false;
            expect *= t.shape[d];
        }
        return t.strides.empty() || t.strides.size() == t.ndim();
    }

    Result<int> sourceFd(uint32_t file)
    {
        if (auto it = m_fds.find(file); it != m_fds.end())
            return it->second;
        auto fd = openRegularFile((fs::path(m_fixed.dataDir) / m_fixed.files[file]).string());
        if (!fd)
            return fd.error();
        m_fds.emplace(file, *fd);
        return *fd;
    }

    const CheckpointIndex &m_fixed;
    std::string m_dir;
    std::unordered_map<size_t, const Rewrite *> m_rewrites;
    std::map<uint32_t, int> m_fds;
    uint64_t m_written = 0;
    bool m_kernelCopy = true;
};

Result<int> create(const std::string &path)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError(path, "cannot create", errno);
    return fd;
}

Status closed(int fd, const std::string &path, Status st)
{
    if (::close(fd) != 0 && st)
        return ioError(path, "cannot write", errno);
    return st;
}

// Closes a descriptor that an exception (an allocation for a big tensor) carries past its
// closed().
struct FdGuard
{
    int fd;
    ~FdGuard()
    {
        if (fd >= 0)
            ::close(fd);
    }
    int release() { return std::exchange(fd, -1); }
};

// One safetensors file: the header (8-byte length, JSON padded with spaces to 8 bytes), then
// every tensor's bytes in header order.
Status writeSafetensorsFile(const CheckpointIndex &fixed, Writer &w, const std::vector<size_t> &ids,
                            const std::string &path)
{
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto &[k, v] : fixed.info)
        if (k.starts_with("safetensors."))
            meta[k.substr(12)] = v;
    if (meta.empty())
        meta["format"] = "pt";
    header["__metadata__"] = meta;
    uint64_t offset = 0;
    for (size_t i : ids) {
        const TensorEntry &t = fixed.tensors[i];
        const std::string_view name = safetensorsName(t.dtype);
        if (name.empty())
            return makeError(Error::Code::Unsupported,
                             "safetensors has no dtype for " + t.dtypeName)
                .atKey(t.key.str());
        const uint64_t n = uint64_t(t.numel()) * uint64_t(elementSize(t.dtype));
        header[t.key] = {
            {"dtype", name}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    auto fd = create(path);
    if (!fd)
        return fd.error();
    FdGuard guard{*fd};
    std::string head(8, '\0');
    for (int b = 0; b < 8; ++b)
        head[size_t(b)] = char((uint64_t(text.size()) >> (8 * b)) & 0xff);
    head += text;
    uint64_t at = 0;
    Status st = Writer::writeAt(*fd, path, head.data(), head.size(), at);
    for (size_t k = 0; st && k < ids.size(); ++k) {
        auto bytes = w.bytesOf(ids[k]);
        if (!bytes)
            st = bytes.error();
        else
            st = w.put(*fd, path, *bytes, at);
    }
    return closed(guard.release(), path, st);
}

// A torch.save archive of the tensors `ids` under their nested names (dicts, as the keys' paths
// give them), each with a storage of its own.
Status writeTorchSaveFile(const CheckpointIndex &fixed, Writer &w, const std::vector<size_t> &ids,
                          const std::string &path)
{
    struct Node
    {
        std::vector<std::string> names; // the children's, in first-seen order
        std::vector<Node> children;
        std::unordered_map<std::string, size_t> at; // a flat dict of 100,000 keys: no scans
        long tensor = -1;
        Node &child(const std::string &name)
        {
            auto [it, fresh] = at.emplace(name, children.size());
            if (fresh) {
                names.push_back(name);
                children.emplace_back();
            }
            return children[it->second];
        }
    };
    Node root;
    for (size_t i : ids) {
        Node *n = &root;
        for (const std::string &part : fixed.tensors[i].path.parts(fixed.tensors[i].key))
            n = &n->child(part);
        if (n->tensor >= 0 || !n->children.empty())
            return makeError(Error::Code::Unsupported, "two entries under one name")
                .atKey(fixed.tensors[i].key.str());
        n->tensor = long(i);
    }
    TorchPickle p;
    std::function<void(const Node &)> emit = [&](const Node &n) {
        if (n.tensor >= 0) {
            const TensorEntry &t = fixed.tensors[size_t(n.tensor)];
            p.tensor(t.dtype, t.shape, std::to_string(n.tensor));
            return;
        }
        p.op('}');
        if (n.children.empty())
            return;
        p.op('(');
        for (size_t i = 0; i < n.children.size(); ++i) {
            p.str(n.names[i]);
            emit(n.children[i]);
        }
        p.op('u');
    };
    emit(root);
    const std::string pickle = p.finish();
    const std::string byteorder = "little", version = "3\n";
    const std::string name = fs::path(path).stem().string();
    auto fd = create(path);
    if (!fd)
        return fd.error();
    FdGuard guard{*fd};
    std::vector<ZipRecord> records;
    uint64_t at = 0;
    auto small = [&](const std::string &record, std::string_view content) {
        ZipRecord r{name + "/" + record,
                    crc32(std::as_bytes(std::span(content.data(), content.size()))), content.size(),
                    at};
        std::string h = zipLocalHeader(r, at);
        h += content;
        records.push_back(r);
        return Writer::writeAt(*fd, path, h.data(), h.size(), at);
    };
    Status st = small("data.pkl", pickle);
    if (st)
        st = small("byteorder", byteorder);
    for (size_t k = 0; st && k < ids.size(); ++k) {
        const size_t i = ids[k];
        auto bytes = w.bytesOf(i);
        if (!bytes) {
            st = bytes.error();
            break;
        }
        auto crc = w.crcOf(*bytes);
        if (!crc) {
            st = crc.error();
            break;
        }
        const uint64_t size = bytes->inFile ? bytes->length : bytes->data.size();
        ZipRecord r{name + "/data/" + std::to_string(i), *crc, size, at};
        const std::string h = zipLocalHeader(r, at);
        records.push_back(r);
        st = Writer::writeAt(*fd, path, h.data(), h.size(), at);
        if (st)
            st = w.put(*fd, path, *bytes, at);
    }
    if (st)
        st = small("version", version);
    if (st) {
        const std::string dir = zipDirectory(records, at);
        st = Writer::writeAt(*fd, path, dir.data(), dir.size(), at);
    }
    return closed(guard.release(), path, st);
}

} // namespace

bool stateDictFormat(Format f)
{
    return f == Format::TorchSave || f == Format::Safetensors || f == Format::SafetensorsIndex ||
           f == Format::TorchSaveIndex;
}

Result<StateDictOutput> writeStateDict(const CheckpointIndex &fixed, const FixPlan &plan,
                                       const std::string &dir, const PlaceFile &place)
{
    StateDictOutput out;
    Writer w(fixed, plan, dir);
    if (fixed.format == Format::TorchSave) {
        if (fixed.files.size() != 1)
            return makeError(Error::Code::Unsupported, "a torch.save checkpoint of " +
                                                           std::to_string(fixed.files.size()) +
                                                           " files")
                .inFile(fixed.inputPath);
        for (const ObjectEntry &o : fixed.objects)
            return makeError(Error::Code::Unsupported,
                             "it holds objects beside its tensors (" + o.key +
                                 "); fix writes torch.save files of tensors only")
                .inFile(fixed.inputPath);
        out.mainFile = fixed.files.front();
        std::vector<size_t> all(fixed.tensors.size());
        std::iota(all.begin(), all.end(), size_t(0));
        if (Status st = writeTorchSaveFile(fixed, w, all, (fs::path(dir) / out.mainFile).string());
            !st)
            return st.error();
        out.filesWritten = 1;
        out.bytesWritten = w.written();
        return out;
    }
    // A set: each tensor in the file its data came from, under the same file names
    // (safetensors, or transformers' torch.save shards of pytorch_model.bin.index.json).
    const bool torchShards = fixed.format == Format::TorchSaveIndex;
    for (const ObjectEntry &o : fixed.objects)
        return makeError(Error::Code::Unsupported, "a shard holds an object beside its tensors (" +
                                                       o.key +
                                                       "); fix writes shards of tensors only")
            .inFile(fixed.inputPath);
    std::map<uint32_t, std::vector<size_t>> byFile;
    for (size_t i = 0; i < fixed.tensors.size(); ++i)
        byFile[w.fileOf(i)].push_back(i);
    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    uint64_t total = 0;
    for (const auto &[file, ids] : byFile) {
        if (file >= fixed.files.size())
            return makeError(Error::Code::Format, "a tensor names no file of the checkpoint");
        const std::string name = fixed.files[file];
        const std::string path = (fs::path(dir) / name).string();
        if (Status st = torchShards ? writeTorchSaveFile(fixed, w, ids, path)
                                    : writeSafetensorsFile(fixed, w, ids, path);
            !st)
            return st.error();
        ++out.filesWritten;
        for (size_t i : ids) {
            weightMap[fixed.tensors[i].key] = name;
            total +=
                uint64_t(fixed.tensors[i].numel()) * uint64_t(elementSize(fixed.tensors[i].dtype));
        }
    }
    out.bytesWritten = w.written();
    const fs::path input(fixed.inputPath);
    std::error_code ec;
    const bool sharded = fixed.format == Format::SafetensorsIndex || torchShards;
    const bool wholeDir = fs::is_directory(input, ec) || sharded;
    out.mainFile = byFile.size() == 1 && fixed.format == Format::Safetensors
                       ? fixed.files[byFile.begin()->first]
                       : std::string();
    if (!wholeDir)
        return out;
    // The set's directory (config.json, tokenizer, …): placed as it is; the index rewritten.
    const fs::path src(fixed.dataDir);
    // The index the set was opened by keeps its name (diffusers' differs from transformers').
    const std::string indexName = input.filename().string().ends_with(".index.json")
                                      ? input.filename().string()
                                  : torchShards ? std::string("pytorch_model.bin.index.json")
                                                : std::string("model.safetensors.index.json");
    const std::set<std::string> shards(fixed.files.begin(), fixed.files.end());
    for (auto it = fs::directory_iterator(src, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (!it->is_regular_file(ec) || n.ends_with(".safetensors") || shards.count(n) ||
            n == indexName || n == kFixManifest)
            continue;
        if (Status st = place(it->path().string(), (fs::path(dir) / n).string()); !st)
            return st.error();
    }
    if (sharded) {
        nlohmann::ordered_json index = nlohmann::ordered_json::object();
        if (auto text = readRegularFile((src / indexName).string(), 256u << 20)) {
            index = nlohmann::ordered_json::parse(*text, nullptr, false);
            if (index.is_discarded() || !index.is_object())
                index = nlohmann::ordered_json::object();
        }
        if (!index.contains("metadata") || !index["metadata"].is_object())
            index["metadata"] = nlohmann::ordered_json::object();
        index["metadata"]["total_size"] = total;
        index["weight_map"] = weightMap;
        const std::string text = index.dump(2) + "\n";
        auto fd = create((fs::path(dir) / indexName).string());
        if (!fd)
            return fd.error();
        uint64_t at = 0;
        if (Status st = closed(*fd, indexName,
                               Writer::writeAt(*fd, indexName, text.data(), text.size(), at));
            !st)
            return st.error();
        out.mainFile = indexName;
    }
    return out;
}

} // namespace shardscope::detail

namespace shardscope::detail {

namespace {

std::string legacyDirOf(std::string_view key)
{
    const size_t slash = key.find('/');
    return slash == std::string_view::npos ? std::string() : std::string(key.substr(0, slash));
}

// Tensor-parallel rank 0's directory of a rank directory: mp_rank_03_001 → mp_rank_00_001.
std::string firstTpRank(const std::string &dir)
{
    return dir.starts_with("mp_rank_") && dir.size() >= 10 ? "mp_rank_00" + dir.substr(10) : dir;
}

// One rank file written anew: its records as stored, its pickle with `model` reassigned.
class LegacyFileWriter
{
public:
    LegacyFileWriter(const CheckpointIndex &fixed, const FixPlan &plan, Writer &w)
        : m_fixed(fixed)
        , m_plan(plan)
        , m_w(w)
    {
        for (const Rewrite &r : plan.rewrites)
            m_rewrites.emplace(plan.firstNew + r.tensor, &r);
    }

    Status write(const LegacyArchive &a, const std::string &path)
    {
        const auto file = std::find(m_fixed.files.begin(), m_fixed.files.end(), a.file);
        if (file == m_fixed.files.end())
            return makeError(Error::Code::Format, "not a file of the checkpoint").inFile(a.file);
        m_file = uint32_t(file - m_fixed.files.begin());
        m_dir = legacyDirOf(a.file);
        m_first = firstTpRank(m_dir);
        auto scan = scanPickle(a.pickle);
        if (!scan)
            return scan.error().inFile(path);
        const PickleNode &root = *scan->root;
        const PickleNode *model =
            root.kind == PickleNode::Kind::Dict || root.kind == PickleNode::Kind::Reduce
                ? dictValue(root, "model")
                : nullptr;
        if (!model ||
            (model->kind != PickleNode::Kind::Dict && model->kind != PickleNode::Kind::Reduce))
            return makeError(Error::Code::Unsupported,
                             "holds no `model` dict at its top; fix rewrites only that entry")
                .inFile(a.file);
        m_originals.clear();
        for (size_t i = 0; i + 1 < model->items.size(); i += 2)
            if (model->items[i]->kind == PickleNode::Kind::Str)
                m_originals.emplace(model->items[i]->text, model->items[i + 1].get());
        if (m_dir != m_first) {
            m_own.clear();
            const std::string head = m_dir + "/";
            for (size_t i = 0; i < m_fixed.tensors.size(); ++i)
                if (m_fixed.tensors[i].key.starts_with(head))
                    m_own.emplace(m_fixed.tensors[i].key.str(), i);
        }
        // The new `model`: the old one's class, rank 0's repaired names, the old one's state
        // (an OrderedDict's _metadata). Nothing is memoised: every slot the old pickle filled
        // keeps what it holds.
        TorchPickle p;
        p.str("model");
        const bool ordered = model->kind == PickleNode::Kind::Reduce;
        if (ordered) {
            p.global("collections", "OrderedDict");
            p.op(')');
            p.op('R');
        } else {
            p.op('}');
        }
        m_fresh.clear();
        size_t batch = 0;
        const std::string head = m_first + "/model.";
        auto entry = [&](const std::string &name, const std::function<Status()> &value) -> Status {
            if (batch == 0)
                p.op('(');
            p.str(name);
            if (Status st = value(); !st)
                return st;
            if (++batch == 1000) {
                p.op('u');
                batch = 0;
            }
            return Ok{};
        };
        for (size_t i = 0; i < m_fixed.tensors.size(); ++i) {
            const TensorEntry &t = m_fixed.tensors[i];
            if (!t.key.starts_with(head))
                continue;
            const std::string name = t.key.str().substr(head.size());
            std::string from = name;
            bool fresh = false;
            if (i >= m_plan.firstNew) {
                const std::string &origin = m_plan.origins.at(i - m_plan.firstNew);
                fresh = origin.empty();
                if (!fresh && !origin.starts_with(head))
                    return makeError(Error::Code::Unsupported,
                                     "its data is in another rank file (" + origin + ")")
                        .atKey(t.key.str());
                if (!fresh)
                    from = origin.substr(head.size());
            }
            Status st = entry(name, [&]() -> Status {
                if (!fresh)
                    return original(p, from);
                const std::string key = "shardscope_" + std::to_string(m_fresh.size());
                p.tensor(t.dtype, t.shape.toVector(), key);
                m_fresh.emplace_back(i, key);
                return Ok{};
            });
            if (!st)
                return st;
        }
        for (const ObjectEntry &o : m_fixed.objects)
            if (o.key.starts_with(head)) {
                const std::string name = o.key.str().substr(head.size());
                if (Status st = entry(name, [&] { return original(p, name); }); !st)
                    return st;
            }
        if (batch > 0)
            p.op('u');
        if (model->state) {
            if (model->state->memo < 0)
                return makeError(Error::Code::Unsupported,
                                 "the `model` dict's state is not in the pickle's memo")
                    .inFile(a.file);
            p.get(uint64_t(model->state->memo));
            p.op('b');
        }
        p.op('s'); // state_dict['model'] = the new one
        const std::string pickle = a.pickle.substr(0, scan->stop) + p.body() + ".";
        return writeArchive(a, pickle, path);
    }

private:
    // The old `model` entry's value `name`: the same object, from the memo.
    Status original(TorchPickle &p, const std::string &name)
    {
        auto it = m_originals.find(name);
        if (it == m_originals.end())
            return makeError(Error::Code::Format, "its `model` entry has no " + name +
                                                      ", which rank " + m_first + "'s has")
                .inFile(m_dir);
        const PickleNode &n = *it->second;
        if (n.memo >= 0)
            p.get(uint64_t(n.memo));
        else if (!n.constant.empty())
            p.append(n.constant);
        else
            return makeError(Error::Code::Unsupported,
                             "the value of " + name + " is not in the pickle's memo")
                .inFile(m_dir);
        return Ok{};
    }

    // A fresh key's bytes: rank 0's as planned; another TP rank's from its own tensors of the
    // same names, cut the same way (its TP-local shapes are rank 0's).
    Result<TensorBytes> freshBytes(size_t i)
    {
        if (m_dir == m_first)
            return m_w.bytesOf(i);
        const TensorEntry &t = m_fixed.tensors[i];
        TensorBytes b;
        if (t.numel() == 0)
            return b;
        auto r = m_rewrites.find(i);
        if (r == m_rewrites.end())
            return makeError(Error::Code::Unsupported,
                             "rank " + m_dir + "'s copy of a key built from chunks")
                .atKey(t.key.str());
        Rewrite own = *r->second;
        for (RewritePiece &piece : own.pieces) {
            const std::string key = m_dir + piece.stored.key.str().substr(m_first.size());
            auto it = m_own.find(key);
            if (it == m_own.end())
                return makeError(Error::Code::Format, "rank " + m_dir + " has no " + key)
                    .atKey(t.key.str());
            piece.stored = m_fixed.tensors[it->second];
        }
        auto data = assembleRewrite(m_fixed, t, own);
        if (!data)
            return data.error();
        b.data = std::move(*data);
        return b;
    }

    Status writeArchive(const LegacyArchive &a, const std::string &pickle, const std::string &path)
    {
        auto fd = create(path);
        if (!fd)
            return fd.error();
        FdGuard guard{*fd};
        std::vector<ZipRecord> records;
        uint64_t at = 0;
        auto record = [&](const std::string &name, TensorBytes &b) -> Status {
            auto crc = m_w.crcOf(b);
            if (!crc)
                return crc.error();
            ZipRecord r{a.prefix + "/" + name, *crc, b.inFile ? b.length : b.data.size(), at};
            const std::string h = zipLocalHeader(r, at);
            records.push_back(r);
            if (Status st = Writer::writeAt(*fd, path, h.data(), h.size(), at); !st)
                return st;
            return m_w.put(*fd, path, b, at);
        };
        // data.pkl first: torch's reader takes the archive's folder from the first record.
        TensorBytes head;
        head.data.resize(pickle.size());
        std::memcpy(head.data.data(), pickle.data(), pickle.size());
        Status st = record("data.pkl", head);
        for (size_t k = 0; st && k < a.records.size(); ++k) {
            TensorBytes b;
            b.inFile = true;
            b.file = m_file;
            b.offset = a.records[k].offset;
            b.length = a.records[k].size;
            st = record(a.records[k].name, b);
        }
        for (size_t k = 0; st && k < m_fresh.size(); ++k) {
            auto b = freshBytes(m_fresh[k].first);
            if (!b)
                st = b.error();
            else
                st = record("data/" + m_fresh[k].second, *b);
        }
        if (st) {
            const std::string dir = zipDirectory(records, at);
            st = Writer::writeAt(*fd, path, dir.data(), dir.size(), at);
        }
        return closed(guard.release(), path, st);
    }

    const CheckpointIndex &m_fixed;
    const FixPlan &m_plan;
    Writer &m_w;
    std::unordered_map<size_t, const Rewrite *> m_rewrites;
    uint32_t m_file = 0;
    std::string m_dir, m_first;
    std::unordered_map<std::string, const PickleNode *> m_originals;
    std::unordered_map<std::string, size_t> m_own; ///< this rank's keys → fixed.tensors
    std::vector<std::pair<size_t, std::string>> m_fresh;
};

} // namespace

std::vector<std::string> legacyFilesChanged(const CheckpointIndex &source, const FixPlan &plan,
                                            int tp)
{
    std::set<std::string> dirs;
    for (size_t i : plan.dropped)
        dirs.insert(legacyDirOf(source.tensors[i].key));
    for (size_t i : plan.droppedObjects)
        dirs.insert(legacyDirOf(source.objects[i].key));
    for (const TensorEntry &t : plan.tensors)
        dirs.insert(legacyDirOf(t.key));
    for (const ObjectEntry &o : plan.objects)
        dirs.insert(legacyDirOf(o.key));
    std::set<std::string> files;
    for (const TensorEntry &t : source.tensors) {
        const std::string dir = legacyDirOf(t.key);
        if (dir.empty() || t.chunks.empty() ||
            !std::string_view(t.key).substr(dir.size()).starts_with("/model."))
            continue;
        bool take = dirs.count(dir) > 0;
        if (!take && dir != firstTpRank(dir) && dirs.count(firstTpRank(dir)))
            take = std::atoi(dir.substr(8, 2).c_str()) < tp;
        if (take && t.chunks.front().file < source.files.size())
            files.insert(source.files[t.chunks.front().file]);
    }
    return {files.begin(), files.end()};
}

Result<StateDictOutput> writeLegacyFiles(const CheckpointIndex &fixed, const FixPlan &plan,
                                         const std::vector<LegacyArchive> &archives,
                                         const std::string &dataOut)
{
    if (!plan.objects.empty())
        return makeError(Error::Code::Unsupported,
                         "a legacy rank file's objects are not renamed (" +
                             plan.objects.front().key + ")")
            .inFile(fixed.inputPath);
    StateDictOutput out;
    Writer w(fixed, plan, dataOut);
    LegacyFileWriter lw(fixed, plan, w);
    for (const LegacyArchive &a : archives) {
        if (Status st = lw.write(a, (fs::path(dataOut) / a.file).string()); !st)
            return st.error();
        ++out.filesWritten;
    }
    out.bytesWritten = w.written();
    return out;
}

} // namespace shardscope::detail
