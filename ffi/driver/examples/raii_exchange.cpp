// raii_exchange.cpp: libnrt_proxy.so from C++17, every handle held by an RAII wrapper (the
// library instance, the group, each comm, each comm's proxy-queue membership, each plan).
// Two ranks of one process run a send-recv (rank r sends 16 KiB to r+1 and receives from r-1)
// with FIFOs and device programs from the planner; a std::thread plays the device of both
// ranks by interpreting each block's program (nrt_proxy_plan_program). Every word is checked.
//
// Build: g++ -std=c++17 -Wall -Wextra -Werror raii_exchange.cpp -pthread -o raii_exchange
//            $(pkg-config --cflags --libs nrt_proxy)      (one command line)
// Run:   ./raii_exchange [--host-device] [/path/to/libnccom_proxy.so]
//        (default: libnccom_proxy.so.1; --host-device: the library plays the devices)
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nrt_proxy.h"

namespace nrt {

// Throws on any status but NRT_SUCCESS, naming the call.
inline void check(NRT_STATUS s, const char *what) {
    if (s != NRT_SUCCESS)
        throw std::runtime_error(std::string(what) + ": " + nrt_get_status_as_str(s));
}

// One owned handle: `Destroy` runs once, when the owner goes (moves transfer ownership).
template <typename T, NRT_STATUS (*Destroy)(T *)> class Handle {
  public:
    Handle() = default;
    explicit Handle(T *h) : h_(h) {}
    Handle(Handle &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    Handle &operator=(Handle &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() { reset(); }
    T *get() const { return h_; }
    void reset() {
        if (h_ != nullptr && Destroy(h_) != NRT_SUCCESS)
            std::fprintf(stderr, "raii_exchange: a destroy failed (the log says why)\n");
        h_ = nullptr;
    }

  private:
    T *h_ = nullptr;
};

class Library {
  public:
    explicit Library(const char *progress_lib) {
        nrt_proxy_config_t cfg;
        check(nrt_proxy_config_from_env(&cfg), "nrt_proxy_config_from_env");
        cfg.progress_lib = progress_lib; // NULL: $NEURON_RT_PROXY_PROGRESS_LIB or the SONAME
        nrt_proxy_t *inst = nullptr;
        check(nrt_proxy_init(&cfg, &inst), "nrt_proxy_init");
        h_ = Handle<nrt_proxy_t, nrt_proxy_fini>(inst);
    }
    nrt_proxy_t *get() const { return h_.get(); }

  private:
    Handle<nrt_proxy_t, nrt_proxy_fini> h_;
};

class Group {
  public:
    Group(const Library &lib, uint32_t nranks) {
        nrt_proxy_group_t *g = nullptr;
        check(nrt_proxy_group_create(lib.get(), nranks, &g), "nrt_proxy_group_create");
        h_ = Handle<nrt_proxy_group_t, nrt_proxy_group_destroy>(g);
    }
    nrt_proxy_group_t *get() const { return h_.get(); }

  private:
    Handle<nrt_proxy_group_t, nrt_proxy_group_destroy> h_;
};

class Comm {
  public:
    Comm(const Library &lib, const Group &group, uint32_t rank, uint32_t nranks, uint32_t id,
         const nccom_device_callbacks_t *cbs) {
        nrt_proxy_comm_config_t cc;
        check(nrt_proxy_comm_config_init(&cc), "nrt_proxy_comm_config_init");
        cc.rank = rank;
        cc.nranks = nranks;
        cc.comm_id = id;
        cc.group = group.get();
        cc.callbacks = cbs;
        nrt_proxy_comm_t *c = nullptr;
        check(nrt_proxy_comm_create(lib.get(), &cc, &c), "nrt_proxy_comm_create");
        h_ = Handle<nrt_proxy_comm_t, nrt_proxy_comm_destroy>(c);
    }
    nrt_proxy_comm_t *get() const { return h_.get(); }

  private:
    Handle<nrt_proxy_comm_t, nrt_proxy_comm_destroy> h_;
};

// The comm's place on its proxy queue: joined while this lives.
class Membership {
  public:
    explicit Membership(const Comm &comm) : comm_(comm.get()) {
        check(nrt_proxy_comm_join(comm_), "nrt_proxy_comm_join");
    }
    Membership(const Membership &) = delete;
    Membership &operator=(const Membership &) = delete;
    ~Membership() {
        if (nrt_proxy_comm_leave(comm_, 10000) != NRT_SUCCESS)
            std::fprintf(stderr, "raii_exchange: nrt_proxy_comm_leave failed\n");
    }

  private:
    nrt_proxy_comm_t *comm_;
};

class Plan {
  public:
    explicit Plan(const nrt_proxy_plan_params_t &p) {
        nrt_proxy_plan_t *h = nullptr;
        check(nrt_proxy_plan_create(&p, &h), "nrt_proxy_plan_create");
        h_ = Handle<nrt_proxy_plan_t, nrt_proxy_plan_destroy>(h);
        layout_.struct_size = sizeof layout_;
        check(nrt_proxy_plan_layout(get(), &layout_), "nrt_proxy_plan_layout");
        size_t n = 0;
        infos_.resize(layout_.n_blocks);
        check(nrt_proxy_plan_blocks(get(), infos_.data(), infos_.size(), &n),
              "nrt_proxy_plan_blocks");
    }
    nrt_proxy_plan_t *get() const { return h_.get(); }
    const nrt_proxy_plan_layout_t &layout() const { return layout_; }
    const std::vector<nrt_proxy_plan_block_info_t> &blocks() const { return infos_; }

  private:
    Handle<nrt_proxy_plan_t, nrt_proxy_plan_destroy> h_;
    nrt_proxy_plan_layout_t layout_{};
    std::vector<nrt_proxy_plan_block_info_t> infos_;
};

// The library's host device for one rank's plan (ABI 1.2): plays its device program on host
// memory, on a thread of the library, so a runtime needs no device code of its own.
class HostDevice {
  public:
    HostDevice(const Plan &plan, const nrt_proxy_plan_addresses_t &addrs) {
        nrt_proxy_host_device_t *d = nullptr;
        check(nrt_proxy_host_device_create(plan.get(), &addrs, &d), "nrt_proxy_host_device_create");
        h_ = Handle<nrt_proxy_host_device_t, nrt_proxy_host_device_destroy>(d);
    }
    // One launch of `executions` executions, gated on the network task's trigger word, run on a
    // library thread until wait() sees it done.
    void start(uint32_t executions, nccom_host_word_t *net_trigger) {
        nccom_host_word_t *trig[1] = {net_trigger};
        check(nrt_proxy_host_device_launch(h_.get(), executions, trig, 1, nullptr, 0, nullptr),
              "nrt_proxy_host_device_launch");
        check(nrt_proxy_host_device_start(h_.get()), "nrt_proxy_host_device_start");
    }
    void wait(uint64_t timeout_ms) {
        check(nrt_proxy_host_device_wait(h_.get(), timeout_ms), "nrt_proxy_host_device_wait");
    }

  private:
    Handle<nrt_proxy_host_device_t, nrt_proxy_host_device_destroy> h_;
};

} // namespace nrt

namespace {

constexpr uint32_t kRanks = 2;
constexpr uint64_t kCount = 4096; // int32 per rank: 16 KiB, 4 chunks of 4 KiB

void inc_semaphore(nccom_host_word_t *w, uint32_t v) {
    __atomic_fetch_add(w, v, __ATOMIC_RELEASE);
}
uint32_t load(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
void store(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }

// One rank: its plan (one stream, one block), buffers, host words, FIFOs and device program.
struct Rank {
    explicit Rank(const nrt_proxy_plan_params_t &p) : plan(p) {
        const auto &l = plan.layout();
        const auto &b = plan.blocks().at(0);
        input.resize(l.input_bytes / 4);
        output.resize(l.output_bytes / 4);
        scratch.resize(l.scratch_bytes + 1);
        words = std::vector<uint32_t>(l.host_words);
        ops.resize(b.n_ops);
        src.resize(b.n_src);
        dst.resize(b.n_dst);
        prog.resize(b.n_instrs);
        nrt_proxy_plan_addresses_t &a = addrs;
        a.input = reinterpret_cast<uintptr_t>(input.data());
        a.output = reinterpret_cast<uintptr_t>(output.data());
        a.scratch = reinterpret_cast<uintptr_t>(scratch.data());
        a.words = reinterpret_cast<uintptr_t>(words.data());
        a.word_stride = sizeof(uint32_t);
        nrt::check(nrt_proxy_plan_fifos(plan.get(), 0, &a, ops.data(), ops.size(), src.data(),
                                        src.size(), dst.data(), dst.size(), &block),
                   "nrt_proxy_plan_fifos");
        size_t n = 0;
        nrt::check(nrt_proxy_plan_program(plan.get(), 0, prog.data(), prog.size(), &n),
                   "nrt_proxy_plan_program");
    }
    nccom_host_word_t *word(uint32_t op, uint32_t w) {
        return &words[op * NRT_PROXY_PLAN_WORDS_PER_OP + w];
    }
    unsigned char *at(uint32_t buf, uint64_t off) {
        switch (buf) {
        case NRT_PROXY_BUF_INPUT: return reinterpret_cast<unsigned char *>(input.data()) + off;
        case NRT_PROXY_BUF_OUTPUT: return reinterpret_cast<unsigned char *>(output.data()) + off;
        default: return scratch.data() + off;
        }
    }

    nrt::Plan plan;
    std::vector<uint32_t> input, output;
    std::vector<unsigned char> scratch;
    std::vector<uint32_t> words; // host words: touched only through the atomics above
    std::vector<neuron_net_op_info_t> ops;
    std::vector<neuron_net_src_addr_t> src;
    std::vector<neuron_net_dest_addr_t> dst;
    std::vector<nrt_proxy_plan_instr_t> prog;
    nrt_proxy_block_t block{};
    nrt_proxy_plan_addresses_t addrs{};
    uint32_t trigger = 0xFFFFFFFFu;
};

// The device of one rank: runs its program once (semaphores start at 0: one execution).
void run_device(Rank &r, const std::atomic<bool> &stop) {
    store(&r.trigger, 1); // the net stage is reached
    for (const auto &in : r.prog) {
        const uint32_t s = in.side;
        const uint32_t post = s ? NRT_PROXY_PLAN_WORD_POST_RECV : NRT_PROXY_PLAN_WORD_POST_SEND;
        const uint32_t hs = s ? NRT_PROXY_PLAN_WORD_RECV_HANDSHAKE : NRT_PROXY_PLAN_WORD_SEND_HANDSHAKE;
        const uint32_t cpl = s ? NRT_PROXY_PLAN_WORD_RECV_COMPLETE : NRT_PROXY_PLAN_WORD_SEND_COMPLETE;
        switch (in.kind) {
        case NRT_PROXY_INSTR_ARM: store(r.word(in.op, post), NCCOM_HOST_WORD_READY); break;
        case NRT_PROXY_INSTR_WAIT_HANDSHAKE:
            while (load(r.word(in.op, hs)) < 1 && !stop)
                std::this_thread::yield();
            break;
        case NRT_PROXY_INSTR_POST: store(r.word(in.op, post), in.upto); break;
        case NRT_PROXY_INSTR_WAIT:
            while (load(r.word(in.op, cpl)) < in.upto && !stop)
                std::this_thread::yield();
            break;
        case NRT_PROXY_INSTR_COPY:
            std::memcpy(r.at(in.dst_buf, in.dst_offset), r.at(in.a_buf, in.a_offset), in.count);
            break;
        default: // send-recv reduces nothing
            throw std::runtime_error("unexpected instruction kind " + std::to_string(in.kind));
        }
    }
}

int run(const char *progress_lib, bool host_device) {
    nrt::Library lib(progress_lib);
    nrt::Group group(lib, kRanks);
    static const nccom_device_callbacks_t cbs = [] {
        nccom_device_callbacks_t c{};
        c.nec_inc_semaphore = inc_semaphore;
        return c;
    }();
    std::vector<Rank> ranks;
    ranks.reserve(kRanks); // the FIFOs hold addresses into each Rank: no reallocation
    std::vector<nrt::Comm> comms;
    std::vector<std::unique_ptr<nrt::Membership>> members;
    for (uint32_t r = 0; r < kRanks; r++) {
        nrt_proxy_plan_params_t p;
        nrt::check(nrt_proxy_plan_params_init(&p), "nrt_proxy_plan_params_init");
        p.collective = NRT_PROXY_COLL_SEND_RECV;
        p.dtype = NRT_PROXY_DTYPE_I32;
        p.rank = r;
        p.nranks = kRanks;
        p.count = kCount;
        p.chunk_bytes = 4096;
        ranks.emplace_back(p);
        for (uint64_t i = 0; i < kCount; i++)
            ranks[r].input[i] = r * 100000u + static_cast<uint32_t>(i);
        comms.emplace_back(lib, group, r, kRanks, 7, &cbs);
        members.push_back(std::make_unique<nrt::Membership>(comms[r]));
    }
    for (uint32_t r = 0; r < kRanks; r++) {
        nccom_host_word_t *trig[1] = {&ranks[r].trigger};
        nrt_proxy_network_task_t t{};
        t.struct_size = sizeof t;
        t.task_id = 40 + r;
        t.blocks = &ranks[r].block;
        t.n_blocks = 1;
        t.trigger_words = trig;
        t.n_trigger_words = 1;
        t.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE;
        nrt::check(nrt_proxy_submit_network(comms[r].get(), &t), "nrt_proxy_submit_network");
    }
    std::atomic<bool> stop{false};
    std::vector<nrt::HostDevice> devices;
    std::thread device;
    if (host_device) {
        for (auto &r : ranks) {
            devices.emplace_back(r.plan, r.addrs);
            devices.back().start(1, &r.trigger);
        }
    } else {
        device = std::thread([&] {
            std::vector<std::thread> lanes;
            for (auto &r : ranks)
                lanes.emplace_back([&r, &stop] { run_device(r, stop); });
            for (auto &l : lanes)
                l.join();
        });
    }
    int bad = 0;
    for (uint32_t r = 0; r < kRanks; r++) {
        nrt_proxy_task_record_t rec;
        NRT_STATUS s = nrt_proxy_wait(comms[r].get(), 10000, &rec);
        if (s != NRT_SUCCESS || rec.progress_status != NRT_SUCCESS || rec.task_id != 40 + r) {
            std::fprintf(stderr, "rank %u: wait %s, task %u status %s\n", r,
                         nrt_get_status_as_str(s), rec.task_id,
                         nrt_get_status_as_str(rec.progress_status));
            bad++;
        }
    }
    stop = bad != 0; // a failed task: release the device's waits
    if (host_device) {
        for (auto &d : devices)
            if (bad == 0)
                d.wait(10000);
        devices.clear(); // destroyed (a thread still running is stopped)
    } else {
        device.join();
    }
    for (uint32_t r = 0; r < kRanks && bad == 0; r++) {
        const uint32_t from = (r + kRanks - 1) % kRanks;
        for (uint64_t i = 0; i < kCount; i++)
            if (ranks[r].output[i] != from * 100000u + i) {
                std::fprintf(stderr, "rank %u word %llu: %u\n", r,
                             static_cast<unsigned long long>(i), ranks[r].output[i]);
                bad++;
                break;
            }
    }
    // The wrappers go in reverse order: memberships (leave), comms, plans, group, library.
    members.clear();
    if (bad != 0)
        return 1;
    std::printf("raii_exchange: ok: %u ranks, %llu int32 each, C++17 RAII wrappers, %s\n", kRanks,
                static_cast<unsigned long long>(kCount),
                host_device ? "the library's host devices" : "its own device thread");
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    try {
        // Arguments: [--host-device] [/path/to/libnccom_proxy.so]
        bool host_device = argc > 1 && std::strcmp(argv[1], "--host-device") == 0;
        int lib = host_device ? 2 : 1;
        return run(argc > lib ? argv[lib] : nullptr, host_device);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "raii_exchange: %s\n", e.what());
        return 1;
    }
}
