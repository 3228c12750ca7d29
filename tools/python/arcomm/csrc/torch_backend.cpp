// SPDX-License-Identifier: MIT
//
// arcomm.torch's native path: a c10d::Backend whose hot calls on host tensors go straight
// from torch's dispatcher to libarcomm, with no Python and no GIL on the way.
//
// arcomm/torch.py compiles this file against the torch in use at first import
// (torch.utils.cpp_extension, cached per torch version), so it never mismatches torch's
// C++ ABI.  It does not link against libarcomm: the Python package has already loaded the
// library with ctypes (the one ARCOMM_LIBRARY or the package's lookup chose), and passes
// the addresses of the functions used here.  So the C++ calls go to the very library
// instance that made the communicator, whichever file that was, and the build needs no
// arcomm headers or library path.
//
// What it serves: one contiguous CPU tensor of an arcomm dtype per call (all_reduce with
// SUM, AVG, PRODUCT, MIN, MAX; broadcast; reduce; all_gather_into_tensor;
// reduce_scatter_tensor; all_to_all_single with even splits; barrier; send and recv with
// tag 0).  A call with async_op=False runs the blocking C call and returns a completed
// Work; with async_op=True it runs the comm_i* call and its Work's wait() is comm_wait.
// Everything else (CUDA tensors, list forms, uneven splits, non-contiguous or conjugate
// tensors, other dtypes and ops, a closed group) goes to the Python ArcommProcessGroup,
// under the GIL, which serves it or raises saying what to do instead.  Failures are
// raised by that same Python object (_native_failure), so both paths raise arcomm.Error
// with comm_last_error's message.

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <cstdint>
#include <string>

namespace py = pybind11;

namespace {

// The C API's values (include/arcomm.h), which this file does not include.
enum : int {
    F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I32 = 4, I64 = 5, I8 = 6, U8 = 7, U32 = 8, U64 = 9
};
enum : int { OP_SUM = 0, OP_MAX = 1, OP_MIN = 2, OP_PROD = 3, OP_AVG = 4 };

using comm_p = void *;
using req_p = void *;

// The functions of libarcomm this file calls, from the addresses ctypes resolved.
struct Api {
    int (*allreduce)(comm_p, const void *, void *, size_t, int, int, void *);
    int (*broadcast)(comm_p, const void *, void *, size_t, int, int, void *);
    int (*reduce)(comm_p, const void *, void *, size_t, int, int, int, void *);
    int (*allgather)(comm_p, const void *, void *, size_t, int, void *);
    int (*reduce_scatter)(comm_p, const void *, void *, size_t, int, int, void *);
    int (*alltoall)(comm_p, const void *, void *, size_t, int, void *);
    int (*barrier)(comm_p);
    int (*iallreduce)(comm_p, const void *, void *, size_t, int, int, req_p *);
    int (*ibroadcast)(comm_p, const void *, void *, size_t, int, int, req_p *);
    int (*ireduce)(comm_p, const void *, void *, size_t, int, int, int, req_p *);
    int (*iallgather)(comm_p, const void *, void *, size_t, int, req_p *);
    int (*ireduce_scatter)(comm_p, const void *, void *, size_t, int, int, req_p *);
    int (*ialltoall)(comm_p, const void *, void *, size_t, int, req_p *);
    int (*ibarrier)(comm_p, req_p *);
    int (*isend)(comm_p, const void *, size_t, int, int, req_p *); // may be NULL
    int (*irecv)(comm_p, void *, size_t, int, int, req_p *);       // may be NULL
    int (*wait)(req_p *);
    int (*test)(req_p *, int *);
};

template <typename F> void load(const py::dict &addr, const char *name, F &fn, bool required)
{
    if (!addr.contains(name) || addr[name].is_none()) {
        if (required)
            throw std::invalid_argument(std::string("arcomm.torch native: no address for ") + name);
        fn = nullptr;
        return;
    }
    fn = reinterpret_cast<F>(static_cast<uintptr_t>(addr[name].cast<uint64_t>()));
}

int dtype_code(at::ScalarType t)
{
    switch (t) {
    case at::kFloat: return F32;
    case at::kHalf: return F16;
    case at::kBFloat16: return BF16;
    case at::kDouble: return F64;
    case at::kInt: return I32;
    case at::kLong: return I64;
    case at::kChar: return I8;
    case at::kByte: return U8;
    case at::kUInt32: return U32;
    case at::kUInt64: return U64;
    default: return -1;
    }
}

// opts.asyncOp where the torch in use has it, else true (older torch: every call is
// issued without blocking and its Work's wait completes it).
template <typename O> auto async_of(const O &o, int) -> decltype(bool(o.asyncOp))
{
    return o.asyncOp;
}
template <typename O> bool async_of(const O &, long)
{
    return true;
}
template <typename O> bool is_async(const O &o)
{
    return async_of(o, 0);
}

bool is_float(int code)
{
    return code == F32 || code == F16 || code == BF16 || code == F64;
}

// The arcomm op of a torch ReduceOp for dtype code, or -1 (the Python path then serves
// or refuses it: PREMUL_SUM, the bitwise ops, AVG on integers).
int op_code(const c10d::ReduceOp &op, int dtype)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: return OP_SUM;
    case c10d::ReduceOp::AVG: return is_float(dtype) ? OP_AVG : -1;
    case c10d::ReduceOp::PRODUCT: return OP_PROD;
    case c10d::ReduceOp::MIN: return OP_MIN;
    case c10d::ReduceOp::MAX: return OP_MAX;
    default: return -1;
    }
}

// A tensor the C calls can take as it is: CPU, contiguous, an arcomm dtype, no lazy
// negation or conjugation (their memory does not hold the values the tensor shows).
int servable(const at::Tensor &t)
{
    if (!t.defined() || t.device().type() != c10::DeviceType::CPU || !t.is_contiguous() ||
        t.is_neg() || t.is_conj() || t.layout() != c10::kStrided)
        return -1;
    return dtype_code(t.scalar_type());
}

class ArcommBackend;

// The Work of a call the Python group served: its Python Work object (kept alive, and
// released under the GIL) and the C++ Work inside it, which torch's trampoline runs.
class PythonWork : public c10d::Work {
  public:
    explicit PythonWork(py::object o)
        : work_(o.cast<c10::intrusive_ptr<c10d::Work>>()), obj_(std::move(o))
    {
    }

    ~PythonWork() override
    {
        if (!Py_IsInitialized()) {
            obj_.release();
            return;
        }
        py::gil_scoped_acquire gil;
        obj_ = py::object();
    }

    bool isCompleted() override { return work_->isCompleted(); }
    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override
    {
        return work_->wait(timeout);
    }
    std::vector<at::Tensor> result() override { return work_->result(); }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return work_->getFuture(); }

  private:
    c10::intrusive_ptr<c10d::Work> work_;
    py::object obj_;
};

// One call's Work: complete already (the blocking path), or a pending request that
// wait() completes with comm_wait.  The tensors are held until then.
class ArcommWork : public c10d::Work {
  public:
    ArcommWork(c10::intrusive_ptr<ArcommBackend> pg, const char *call, req_p req,
               std::vector<at::Tensor> outputs, at::Tensor keep, int rank, c10d::OpType op)
        : c10d::Work(rank, op), pg_(std::move(pg)), call_(call), req_(req),
          outputs_(std::move(outputs)), keep_(std::move(keep))
    {
    }

    ~ArcommWork() override;

    bool isCompleted() override;
    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  private:
    void complete_();

    c10::intrusive_ptr<ArcommBackend> pg_;
    const char *call_;
    req_p req_;
    int status_ = 0; // the call's status once its request completed
    std::vector<at::Tensor> outputs_;
    at::Tensor keep_; // an input the pending call reads
};

class ArcommBackend : public c10d::Backend {
  public:
    ArcommBackend(py::object fallback, uint64_t comm, const py::dict &addr, int rank, int size)
        : c10d::Backend(rank, size), fallback_(std::move(fallback)),
          comm_(reinterpret_cast<comm_p>(static_cast<uintptr_t>(comm)))
    {
        load(addr, "comm_allreduce", api_.allreduce, true);
        load(addr, "comm_broadcast", api_.broadcast, true);
        load(addr, "comm_reduce", api_.reduce, true);
        load(addr, "comm_allgather", api_.allgather, true);
        load(addr, "comm_reduce_scatter", api_.reduce_scatter, true);
        load(addr, "comm_alltoall", api_.alltoall, true);
        load(addr, "comm_barrier", api_.barrier, true);
        load(addr, "comm_iallreduce", api_.iallreduce, true);
        load(addr, "comm_ibroadcast", api_.ibroadcast, true);
        load(addr, "comm_ireduce", api_.ireduce, true);
        load(addr, "comm_iallgather", api_.iallgather, true);
        load(addr, "comm_ireduce_scatter", api_.ireduce_scatter, true);
        load(addr, "comm_ialltoall", api_.ialltoall, true);
        load(addr, "comm_ibarrier", api_.ibarrier, true);
        load(addr, "comm_isend", api_.isend, false);
        load(addr, "comm_irecv", api_.irecv, false);
        load(addr, "comm_wait", api_.wait, true);
        load(addr, "comm_test", api_.test, true);
    }

    ~ArcommBackend() override
    {
        // The last reference may go after the interpreter has finalized (a Work kept
        // in a C++ structure until exit): the Python group is then left, not released.
        if (!Py_IsInitialized()) {
            fallback_.release();
            return;
        }
        py::gil_scoped_acquire gil;
        fallback_ = py::object();
    }

    const std::string getBackendName() const override { return "arcomm"; }

    const Api &api() const { return api_; }
    uint64_t native_calls() const { return native_.load(std::memory_order_relaxed); }
    uint64_t python_calls() const { return python_.load(std::memory_order_relaxed); }

    // Raises what the Python group makes of status st (arcomm.Error with
    // comm_last_error's message, or what a signal handler raised while the call waited).
    [[noreturn]] void fail(int st, const char *call)
    {
        {
            py::gil_scoped_acquire gil;
            fallback_.attr("_native_failure")(st, call); // raises
        }
        throw c10::DistBackendError(std::string("arcomm.torch: ") + call + ": status " +
                                        std::to_string(st),
                                    {});
    }

    // ---- collectives ----

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override
    {
        if (tensors.size() == 1 && open_()) {
            at::Tensor &t = tensors[0];
            int dt = servable(t);
            int op = dt < 0 ? -1 : op_code(opts.reduceOp, dt);
            if (op >= 0) {
                void *p = t.data_ptr();
                size_t n = t.numel();
                return run_("all_reduce", c10d::OpType::ALLREDUCE, is_async(opts), n, tensors, {},
                            [&](req_p *r) {
                                return r ? api_.iallreduce(comm_, p, p, n, dt, op, r)
                                         : api_.allreduce(comm_, p, p, n, dt, op, nullptr);
                            });
            }
        }
        return fallback_work_("allreduce", tensors, opts);
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override
    {
        if (tensors.size() == 1 && open_() && opts.rootTensor == 0) {
            at::Tensor &t = tensors[0];
            int dt = servable(t);
            int root = static_cast<int>(opts.rootRank);
            if (dt >= 0) {
                void *p = t.data_ptr();
                size_t n = t.numel();
                return run_("broadcast", c10d::OpType::BROADCAST, is_async(opts), n, tensors, {},
                            [&](req_p *r) {
                                return r ? api_.ibroadcast(comm_, p, p, n, dt, root, r)
                                         : api_.broadcast(comm_, p, p, n, dt, root, nullptr);
                            });
            }
        }
        return fallback_work_("broadcast", tensors, opts);
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override
    {
        if (tensors.size() == 1 && open_() && opts.rootTensor == 0) {
            at::Tensor &t = tensors[0];
            int dt = servable(t);
            int op = dt < 0 ? -1 : op_code(opts.reduceOp, dt);
            int root = static_cast<int>(opts.rootRank);
            if (op >= 0) {
                void *p = t.data_ptr();
                size_t n = t.numel();
                return run_("reduce", c10d::OpType::REDUCE, is_async(opts), n, tensors, {},
                            [&](req_p *r) {
                                return r ? api_.ireduce(comm_, p, p, n, dt, op, root, r)
                                         : api_.reduce(comm_, p, p, n, dt, op, root, nullptr);
                            });
            }
        }
        return fallback_work_("reduce", tensors, opts);
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                   const c10d::AllgatherOptions &opts) override
    {
        return gather_into_(out, in, opts);
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &out, at::Tensor &in, const c10d::ReduceScatterOptions &opts) override
    {
        return scatter_from_(out, in, opts);
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                                 std::vector<int64_t> &out_splits,
                                                 std::vector<int64_t> &in_splits,
                                                 const c10d::AllToAllOptions &opts) override
    {
        return alltoall_(out, in, out_splits, in_splits, opts);
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override
    {
        if (open_())
            return run_("barrier", c10d::OpType::BARRIER, is_async(opts), 1, {}, {},
                        [&](req_p *r) {
                            return r ? api_.ibarrier(comm_, r) : api_.barrier(comm_);
                        });
        return fallback_work_("barrier", opts);
    }

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                        int tag) override
    {
        if (tensors.size() == 1 && tag == 0 && api_.isend && open_()) {
            at::Tensor &t = tensors[0];
            int dt = servable(t);
            if (dt >= 0) {
                const void *p = t.data_ptr();
                size_t n = t.numel();
                return run_("send", c10d::OpType::SEND, true, 1, tensors, {},
                            [&](req_p *r) { return api_.isend(comm_, p, n, dt, dst, r); });
            }
        }
        return fallback_work_("send", tensors, dst, tag);
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                        int tag) override
    {
        if (tensors.size() == 1 && tag == 0 && api_.irecv && open_()) {
            at::Tensor &t = tensors[0];
            int dt = servable(t);
            if (dt >= 0) {
                void *p = t.data_ptr();
                size_t n = t.numel();
                return run_("recv", c10d::OpType::RECV, true, 1, tensors, {},
                            [&](req_p *r) { return api_.irecv(comm_, p, n, dt, src, r); });
            }
        }
        return fallback_work_("recv", tensors, src, tag);
    }

    // ---- what the Python group serves (or refuses) ----

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override
    {
        return fallback_work_("allreduce_coalesced", tensors, opts);
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override
    {
        return fallback_work_("allgather", outputs, inputs, opts);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        return fallback_work_("reduce_scatter", outputs, inputs, opts);
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override
    {
        return fallback_work_("alltoall", outputs, inputs, opts);
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        return fallback_work_("gather", outputs, inputs, opts);
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        return fallback_work_("scatter", outputs, inputs, opts);
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override
    {
        return fallback_work_("recv_anysource", tensors, tag);
    }

    // ---- life ----

    void shutdown() override
    {
        closed_.store(true);
        py::gil_scoped_acquire gil;
        fallback_.attr("shutdown")();
    }

    void abort() override
    {
        closed_.store(true);
        py::gil_scoped_acquire gil;
        fallback_.attr("abort")();
    }

  private:
    bool open_() const { return !closed_.load(std::memory_order_relaxed); }

    // One served call: blocking (async_op=False: the C call, then a completed Work), or
    // issued with its comm_i* call (a pending Work).  call(NULL) is the blocking form,
    // call(&req) the non-blocking one.  Nothing is issued for zero elements.
    template <typename F>
    c10::intrusive_ptr<c10d::Work> run_(const char *name, c10d::OpType type, bool async_op,
                                        size_t n, std::vector<at::Tensor> outputs,
                                        at::Tensor keep, F &&call)
    {
        native_.fetch_add(1, std::memory_order_relaxed);
        auto self = c10::intrusive_ptr<ArcommBackend>::unsafe_reclaim_from_nonowning(this);
        if (n == 0)
            return c10::make_intrusive<ArcommWork>(self, name, nullptr, std::move(outputs),
                                                   at::Tensor(), rank_, type);
        req_p req = nullptr;
        int st = call(async_op ? &req : nullptr);
        if (st)
            fail(st, name);
        return c10::make_intrusive<ArcommWork>(self, name, req, std::move(outputs),
                                               req ? std::move(keep) : at::Tensor(), rank_, type);
    }

    template <typename... Args>
    c10::intrusive_ptr<c10d::Work> fallback_work_(const char *method, Args &&...args)
    {
        python_.fetch_add(1, std::memory_order_relaxed);
        py::gil_scoped_acquire gil;
        py::object o = fallback_.attr(method)(std::forward<Args>(args)...);
        if (o.is_none())
            return {};
        return c10::make_intrusive<PythonWork>(std::move(o));
    }

    c10::intrusive_ptr<c10d::Work> gather_into_(at::Tensor &out, at::Tensor &in,
                                                const c10d::AllgatherOptions &opts)
    {
        int dt = servable(in);
        if (open_() && dt >= 0 && servable(out) == dt && out.numel() == size_ * in.numel()) {
            const void *s = in.data_ptr();
            void *r = out.data_ptr();
            size_t n = in.numel();
            return run_("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, is_async(opts), n,
                        {out}, in, [&](req_p *q) {
                            return q ? api_.iallgather(comm_, s, r, n, dt, q)
                                     : api_.allgather(comm_, s, r, n, dt, nullptr);
                        });
        }
        return fallback_work_("all_gather_single", out, in, opts);
    }

    c10::intrusive_ptr<c10d::Work> scatter_from_(at::Tensor &out, at::Tensor &in,
                                                 const c10d::ReduceScatterOptions &opts)
    {
        int dt = servable(out);
        int op = dt < 0 ? -1 : op_code(opts.reduceOp, dt);
        if (open_() && op >= 0 && servable(in) == dt && in.numel() == size_ * out.numel()) {
            const void *s = in.data_ptr();
            void *r = out.data_ptr();
            size_t n = out.numel();
            return run_("reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, is_async(opts),
                        n, {out}, in, [&](req_p *q) {
                            return q ? api_.ireduce_scatter(comm_, s, r, n, dt, op, q)
                                     : api_.reduce_scatter(comm_, s, r, n, dt, op, nullptr);
                        });
        }
        return fallback_work_("reduce_scatter_single", out, in, opts);
    }

    // Even splits only: none given, or every split the same rows per rank.
    bool even_(const at::Tensor &t, const std::vector<int64_t> &splits) const
    {
        if (splits.empty())
            return true;
        int64_t rows = t.dim() ? t.size(0) : 1;
        if (static_cast<int>(splits.size()) != size_)
            return false;
        for (int64_t s : splits)
            if (s * size_ != rows)
                return false;
        return true;
    }

    c10::intrusive_ptr<c10d::Work> alltoall_(at::Tensor &out, at::Tensor &in,
                                             std::vector<int64_t> &out_splits,
                                             std::vector<int64_t> &in_splits,
                                             const c10d::AllToAllOptions &opts)
    {
        int dt = servable(in);
        if (open_() && dt >= 0 && servable(out) == dt && out.numel() == in.numel() &&
            in.numel() % size_ == 0 && (!in.dim() || in.size(0) % size_ == 0) &&
            even_(in, in_splits) && even_(out, out_splits)) {
            const void *s = in.data_ptr();
            void *r = out.data_ptr();
            size_t n = in.numel() / size_;
            return run_("all_to_all_single", c10d::OpType::ALLTOALL_BASE, is_async(opts), n, {out},
                        in, [&](req_p *q) {
                            return q ? api_.ialltoall(comm_, s, r, n, dt, q)
                                     : api_.alltoall(comm_, s, r, n, dt, nullptr);
                        });
        }
        return fallback_work_("all_to_all_single", out, in, out_splits, in_splits, opts);
    }

    py::object fallback_; // the Python ArcommProcessGroup: owns the communicators
    comm_p comm_;         // its host communicator's comm_t
    Api api_{};
    std::atomic<bool> closed_{false};
    std::atomic<uint64_t> native_{0}; // calls served here
    std::atomic<uint64_t> python_{0}; // calls handed to the Python group
};

ArcommWork::~ArcommWork()
{
    // A pending request nobody waited for: completed here, so that the tensors it uses
    // are not freed while the library still reads or writes them.
    if (req_)
        pg_->api().wait(&req_);
}

// wait() and isCompleted() may come from several threads (a Work handed around): one
// of them completes and frees the request, under the Work's mutex, and the status stays
// for the others.  The failure is raised outside the mutex (raising takes the GIL, which
// a thread waiting for the mutex may hold).  The wait hook takes the GIL too, so
// isCompleted only tries the mutex: a Work another thread is completing is not done yet.
void ArcommWork::complete_()
{
    int st;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (req_) {
            status_ = pg_->api().wait(&req_);
            req_ = nullptr;
            keep_ = at::Tensor();
        }
        st = status_;
    }
    if (st)
        pg_->fail(st, call_);
}

bool ArcommWork::wait(std::chrono::milliseconds)
{
    complete_();
    return true;
}

bool ArcommWork::isCompleted()
{
    int st;
    {
        std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
        if (!lock.owns_lock())
            return false;
        if (req_) {
            int done = 0;
            int t = pg_->api().test(&req_, &done);
            if (!t && !done)
                return false;
            status_ = t;
            req_ = nullptr;
            keep_ = at::Tensor();
        }
        st = status_;
    }
    if (st)
        pg_->fail(st, call_);
    return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ArcommWork::getFuture()
{
    // The requests complete when waited for (or by the progress thread, unseen here), so
    // the future is given complete, as the Python path's is (DDP's hooks chain on it).
    complete_();
    auto fut = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    fut->markCompleted(c10::IValue(outputs_));
    return fut;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    py::module_::import("torch.distributed");
    py::class_<ArcommBackend, c10d::Backend, c10::intrusive_ptr<ArcommBackend>>(m, "ArcommBackend")
        .def(py::init<py::object, uint64_t, const py::dict &, int, int>(), py::arg("fallback"),
             py::arg("comm"), py::arg("addresses"), py::arg("rank"), py::arg("size"))
        .def_property_readonly("native_calls", &ArcommBackend::native_calls,
                               "calls served by the native path")
        .def_property_readonly("python_calls", &ArcommBackend::python_calls,
                               "calls handed to the Python ArcommProcessGroup");
}
