"""Adapter choice, device creation with the limits we need, buffers and the pipeline cache."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import threading
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import wgpu

from backend_wgpu.tuning_cache import load_table
from ir.caps import DeviceCaps
from ir.errors import DeviceError, KernelCompileError
from ir.settings import env_int

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences Mesa's warning on headless machines

MAX_CACHED_PIPELINES = 512
LOST_HELP = (
    "the GPU device was lost (driver reset, device destroyed or out of memory); call tr.reset_device() "
    "for a new one, then recreate the tensors that were on the GPU (their data is gone)"
)
READBACK_KEPT_BYTES = 64 << 20  # read-back staging buffers up to this size are kept for the next read
READBACK_KEPT_PER_SIZE = 4  # and this many of each size (reads started ahead hold one each until finished)
# A large read-back's copy out of the mapped staging buffer is split over this many threads (numpy's
# copy releases the GIL); 1: the calling thread alone. Default: 4 on a host of 8 or more cores.
READ_COPY_THREADS = env_int("WGJIT_READ_THREADS", 4 if (os.cpu_count() or 1) >= 8 else 1)
READ_COPY_PART_BYTES = 1 << 20  # a thread's share is at least this: smaller copies are not worth a hand-off
# A read of at least LEND_MIN_BYTES becomes an array over its mapped staging buffer, no copy (LentRead),
# while the staging buffers so lent to live arrays total at most this; 0: every read is copied out
LEND_READ_BYTES = env_int("WGJIT_LEND_READ_BYTES", 256 << 20)
LEND_MIN_BYTES = 1 << 20
# Free upload buffers kept for the next upload of the same size (UploadPool), all sizes together
UPLOAD_POOL_BYTES = env_int("WGJIT_UPLOAD_POOL_BYTES", 64 << 20)
UPLOAD_POOL_BUFFERS = 32  # and at most this many
UPLOAD_POOLED_MAX = 4 << 20  # a larger upload (weights) gets its own buffer, freed when its tensor dies

try:  # wgpu-native's device poll, to wait for a read-back on the calling thread (see Device.read_into)
    from wgpu.backends.wgpu_native import ffi as _ffi
    from wgpu.backends.wgpu_native import lib as _lib
    from wgpu.backends.wgpu_native._api import libf as _libf

    _DEVICE_POLL = _lib.wgpuDevicePoll
    _NULL = _ffi.NULL
    _WRITE_BUFFER = _lib.wgpuQueueWriteBuffer  # Device.write_raw
    # a read-back's copy, recorded and submitted as backend_wgpu.program submits a run: plain C calls, and
    # wgpu-py's error-capturing wrappers for finish and submit (an invalid copy raises at finish)
    _CREATE_ENCODER = _lib.wgpuDeviceCreateCommandEncoder
    _COPY = _lib.wgpuCommandEncoderCopyBufferToBuffer
    _RELEASE_ENCODER = _lib.wgpuCommandEncoderRelease
    _RELEASE_COMMANDS = _lib.wgpuCommandBufferRelease
    _FINISH = _libf.wgpuCommandEncoderFinish
    _SUBMIT = _libf.wgpuQueueSubmit
    _ENCODER_DESC = _ffi.new("WGPUCommandEncoderDescriptor *")
    _COMMANDS_DESC = _ffi.new("WGPUCommandBufferDescriptor *")
    # a read-back's map, asked for and read by plain C calls too (RawMap)
    _MAP_ASYNC = _lib.wgpuBufferMapAsync
    _MAPPED_RANGE = _lib.wgpuBufferGetConstMappedRange
    _UNMAP = _lib.wgpuBufferUnmap
    _MAP_READ = _lib.WGPUMapMode_Read
    _MAP_SUCCESS = _lib.WGPUMapAsyncStatus_Success
    _PROCESS_EVENTS = _lib.WGPUCallbackMode_AllowProcessEvents
except (ImportError, AttributeError):  # another backend: its own waiting
    _DEVICE_POLL = None
    _NULL = None
    _WRITE_BUFFER = None


_copy_pool: Any = None  # the ThreadPoolExecutor of _copy_bytes, made at its first large read


def _copy_bytes(target: np.ndarray, source: np.ndarray) -> None:
    """target[:] = source (uint8, C-contiguous), a large copy split over READ_COPY_THREADS threads.

    The copy out of mapped staging memory is the read-back's host cost once the GPU is done: the H200's
    host copies at ~10 GB/s, from mapped memory as from any array (no page faults: run V's
    readback_map.txt). MiniLM's 6.3 MB hidden state (run Q, benchmarks/runs/2026-12-01-Q/tl_*.txt, two
    processes each): one thread 0.57 and 0.64 ms, four 0.48 and 0.44, eight 0.62 and 0.57. Reads this
    large are lent instead (LentRead) unless past the lending budget."""
    global _copy_pool
    n = source.nbytes
    parts = min(READ_COPY_THREADS, n // READ_COPY_PART_BYTES)
    if parts <= 1:
        target[:] = source
        return
    if _copy_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _copy_pool = ThreadPoolExecutor(READ_COPY_THREADS - 1, thread_name_prefix="wgjit-read")
    step = (-(-n // parts) + 4095) // 4096 * 4096  # page-aligned shares, at most `parts` of them
    others = [_copy_pool.submit(target[i : i + step].__setitem__, slice(None), source[i : i + step])
              for i in range(step, n, step)]  # fmt: skip
    target[:step] = source[:step]  # this thread's share
    for share in others:
        share.result()


def staging_class(size: int) -> int:
    """The size of the kept staging buffer that serves a read of `size` bytes: a power of two up to 1 MiB,
    then a multiple of an eighth of the next power of two (a lent buffer is held as long as its array,
    so it wastes at most an eighth: MiniLM's 6 MiB hidden state takes 6 MiB, not 8)."""
    p2 = max(4096, 1 << (size - 1).bit_length())
    if p2 <= 1 << 20:
        return p2
    step = p2 // 8
    return -(-size // step) * step


class LentRead:
    """The owner of a numpy array that lies in a read-back's mapped staging buffer (Device.read_array).

    A large read is not copied out: the array is made over the mapped memory (`__array_interface__`:
    this object becomes the array's base, and every view of it keeps it alive). When the last of them
    dies the buffer goes to its device's `returned` queue, and the device unmaps it and keeps it for
    a later read (Device._take_back_lent) at its next read-back. On the H200's host the copy this saves
    is ~0.6 ms for 6.3 MB, and the mapped memory reads as fast as any array
    (benchmarks/runs/2026-12-01-V/readback_map.txt)."""

    __slots__ = ("__array_interface__", "staging", "returned")

    def __init__(self, staging: Any, address: int, shape: tuple[int, ...], dtype: np.dtype, returned: deque) -> None:
        self.staging = staging
        self.returned = returned
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (address, False), "version": 3}

    def __del__(self) -> None:
        self.returned.append(self.staging)  # deque.append: safe from any thread, lock or not


class RawMap:
    """A read-back's map asked for from wgpu-native directly, and waited for by polling on the thread
    that reads (Device.finish_read).

    wgpu-py's map_async wakes its poll thread, which waits in a blocking device poll until the map
    is done; a decode loop a token ahead starts the read of token t and then records and submits step
    t+1 while that poll waits, and the submissions were held up by it (H200 timeline, run K: the ~1B
    step's host time to its first submit 0.64 ms a token ahead against 0.25 step then read). The
    callback finds its RawMap by a key in _MAPS, so a read abandoned before its map is done leaves
    nothing the callback could reach after it is gone.
    """

    __slots__ = ("status", "error")

    def __init__(self) -> None:
        self.status: int | None = None  # WGPUMapAsyncStatus once the callback ran
        self.error = ""


_MAPS: dict[int, RawMap] = {}  # maps asked for and not yet called back, by key
_MAP_KEYS = itertools.count(1)

if _DEVICE_POLL is not None:

    @_ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
    def _map_called_back(status: Any, message: Any, userdata1: Any, _userdata2: Any) -> None:
        done = _MAPS.pop(int(_ffi.cast("uintptr_t", userdata1)), None)
        if done is not None:
            if status != _MAP_SUCCESS:
                done.error = _ffi.string(message.data, message.length).decode(errors="replace") if message.data else ""
            done.status = int(status)


# backend_wgpu.timeline's host stamps of a read-back, set while a timeline records (None: off)
READ_STAMP: Any = None

_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_NO_ADAPTER_HELP = (
    "no WebGPU adapter found. On a machine without a GPU install Mesa's software Vulkan driver "
    "(Debian/Ubuntu: sudo apt-get install mesa-vulkan-drivers); `wgjit devices` lists what wgpu sees"
)


def list_adapters() -> list[dict[str, Any]]:
    """Every adapter wgpu can see, with its backend and features."""
    out = []
    for i, a in enumerate(wgpu.gpu.enumerate_adapters_sync()):
        info = a.info
        out.append(
            {
                "index": i,
                "name": info.get("device", ""),
                "vendor": info.get("vendor", ""),
                "backend": info.get("backend_type", ""),
                "type": info.get("adapter_type", ""),
                "features": sorted(a.features),
                "max_storage_binding": a.limits.get("max-storage-buffer-binding-size", 0),
            }
        )
    return out


def _choose_adapter() -> Any:
    wanted = os.environ.get("WGJIT_ADAPTER", "").strip()
    adapters = wgpu.gpu.enumerate_adapters_sync()
    if not adapters:
        raise DeviceError(_NO_ADAPTER_HELP)
    if wanted:
        if wanted.isdigit():
            idx = int(wanted)
            if idx >= len(adapters):
                raise DeviceError(f"WGJIT_ADAPTER={wanted}: only {len(adapters)} adapters (see `wgjit devices`)")
            return adapters[idx]
        for a in adapters:
            if wanted.lower() in f"{a.info.get('device', '')} {a.info.get('backend_type', '')}".lower():
                return a
        names = ", ".join(a.info.get("device", "?") for a in adapters)
        raise DeviceError(f"WGJIT_ADAPTER={wanted!r} matches no adapter (have: {names})")
    # high-performance first; prefer Vulkan/Metal/D3D12 over the GL fallback
    preferred = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    if preferred is not None and preferred.info.get("backend_type") != "OpenGL":
        return preferred
    rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    non_gl = [a for a in adapters if a.info.get("backend_type") != "OpenGL"] or adapters
    return min(non_gl, key=lambda a: rank.get(a.info.get("adapter_type", ""), 4))


@dataclass
class DeviceBuffer:
    """A GPU buffer holding one tensor's elements (contiguous)."""

    buffer: Any
    nbytes: int
    device: Device
    offset: int = 0  # where the tensor starts in `buffer` (a program's arena holds several)
    size: int | None = None  # bytes a binding covers from `offset`; None: to the end of `buffer`

    @property
    def binding_size(self) -> int:
        return self.size if self.size is not None else self.buffer.size - self.offset

    def release(self) -> None:
        if self.buffer is not None:
            self.buffer._wgjit_destroyed = True  # a program keeping it as a spare output must not reuse it
            self.buffer.destroy()
            self.buffer = None


class UploadPool:
    """The GPU buffers of host uploads whose DeviceBuffer died, kept for the next upload of their size.

    A lazy loop uploads its host inputs (token ids, a mask, positions) on every call: into a
    new buffer each time, each program that reads them would build new bind groups too. From
    here the next call's upload of the same size finds the buffer the last call's died with,
    and the program's plan for it (backend_wgpu.program) hits. The input a buffer was last
    uploaded for (`hint`: a program and input index) gets that same buffer back when it is free,
    so several inputs of one size keep their buffers, and their plan, call after call.

    Reusing a buffer that a submitted run may still be reading is safe: the next upload is a
    queue write, which runs after everything submitted before it. A buffer is kept only while
    its DeviceBuffer is dead (nothing can read it outside the queue), and never once destroyed.

    At most `count` buffers and `budget` bytes are kept free (a workload of ever new sizes must
    not collect them), in two parts, each oldest freed first: buffers never reused, and buffers
    reused before (at most half the count; past it the oldest moves back to the first part).
    The never-reused go first: a burst of buffers freed at once (a model's weights, at its end)
    does not push out a loop's, and a new loop's buffers still find room to be reused.
    """

    def __init__(self, budget: int, count: int) -> None:
        self.budget, self.count = budget, count
        self.free_bytes = 0
        self._free: dict[int, dict[int, Any]] = {}  # size -> {id(raw): raw}, the oldest freed first
        self._fresh: OrderedDict[int, Any] = OrderedDict()  # id(raw) -> raw: free, never reused, oldest first
        self._reused: OrderedDict[int, Any] = OrderedDict()  # id(raw) -> raw: free, reused before, oldest first
        # hint -> id() of the buffer last uploaded for it (an id: a buffer dropped from the pool must be free to go)
        self._last: OrderedDict[Hashable, int] = OrderedDict()
        # id(weak reference to a handed-out DeviceBuffer) -> (that reference, its GPU buffer); see _given_back
        self._handed: dict[int, tuple[weakref.ref, Any]] = {}
        self._lock = threading.RLock()  # the garbage collector gives back, from any thread, inside our own locks too

    @property
    def free_count(self) -> int:
        return len(self._fresh) + len(self._reused)

    def take(self, size: int, hint: Hashable | None) -> Any | None:
        """A free buffer of exactly `size` bytes: the one last used for `hint` when free, else the one freed last."""
        with self._lock:
            free = self._free.get(size)
            if not free:
                return None
            raw = free.get(self._last.get(hint)) if hint is not None else None
            if raw is None:
                raw = free.get(next(reversed(free), None))
                if raw is None:
                    return None
            # out of the pool's order first: a collection run by an allocation above may have dropped it
            # (then it is not ours to take), and none run from here on can drop it any more
            key = id(raw)
            if self._fresh.pop(key, None) is None and self._reused.pop(key, None) is None:
                return None
            free.pop(key, None)
            self.free_bytes -= size
            raw._wgjit_reused = True  # freed again, it joins the reused part
            return raw

    def hand_out(self, buf: DeviceBuffer, hint: Hashable | None) -> None:
        """`buf`'s GPU buffer comes back to the pool when `buf` dies."""
        raw = buf.buffer
        ref = weakref.ref(buf, self._given_back)
        with self._lock:
            self._handed[id(ref)] = (ref, raw)
            if hint is not None:
                self._last[hint] = id(raw)
                self._last.move_to_end(hint)
                if len(self._last) > 4096:  # hints of programs long gone
                    self._last.popitem(last=False)

    def _given_back(self, ref: weakref.ref) -> None:
        with self._lock:
            entry = self._handed.pop(id(ref), None)
            if entry is None or getattr(entry[1], "_wgjit_destroyed", False):
                return
            raw = entry[1]
            self._free.setdefault(raw.size, {})[id(raw)] = raw
            if getattr(raw, "_wgjit_reused", False):
                self._reused[id(raw)] = raw
                while len(self._reused) > self.count // 2:  # the oldest reused back with the never reused
                    key, old = self._reused.popitem(last=False)
                    old._wgjit_reused = False
                    self._fresh[key] = old
            else:
                self._fresh[id(raw)] = raw
            self.free_bytes += raw.size
            while self.free_count and (self.free_bytes > self.budget or self.free_count > self.count):
                key, old = (self._fresh or self._reused).popitem(last=False)  # dropped: wgpu frees it when idle
                self._free[old.size].pop(key, None)
                self.free_bytes -= old.size

    def drop(self) -> None:
        """Forget every free buffer (those handed out still come back when they die)."""
        with self._lock:
            self._free.clear()
            self._fresh.clear()
            self._reused.clear()
            self._last.clear()
            self.free_bytes = 0


def host_bytes(array: np.ndarray) -> bytes:
    """An array's elements as a buffer holds them (C order; bool as u32)."""
    data = np.ascontiguousarray(array)
    if data.dtype == np.bool_:
        data = data.astype(np.uint32)
    return data.tobytes()


NVIDIA_VENDOR_ID = 0x10DE


def least_subgroup_size(info: Any) -> int:
    """The fewest lanes a subgroup of this adapter can have (kernels rely on at least this many).

    wgpu reports WebGPU's generic bound (4) for every Vulkan adapter. NVIDIA's Vulkan drivers run
    every compute subgroup as one 32-lane warp (their minimum and maximum subgroup sizes are both 32),
    so there the bound is 32; elsewhere the reported one stands (AMD and Intel drivers pick the size
    per pipeline). WGJIT_SUBGROUP_SIZE=N overrides both (an A/B of the subgroup paths, or an adapter
    whose size you know). wgpu-py 0.32 spells the key "stackgroup_min_size"."""
    forced = env_int("WGJIT_SUBGROUP_SIZE", 0)
    if forced > 0:
        return forced
    reported = int(info.get("subgroup_min_size") or info.get("stackgroup_min_size") or 0)
    vulkan = str(info.get("backend_type", "")).lower() == "vulkan"
    if vulkan and int(info.get("vendor_id") or 0) == NVIDIA_VENDOR_ID:
        return max(reported, 32)
    return reported


@dataclass(eq=False)
class PendingRead:
    """A read-back under way (Device.start_reads): its copy submitted and its map asked for."""

    staging: Any  # the mappable buffer the bytes were copied into
    nbytes: int
    promise: Any  # the map asked for: a RawMap (wgpu-native), else wgpu-py's promise
    device: Device
    done: bool = False


class Device:
    """One wgpu device with its caps, caches and counters."""

    def __init__(self) -> None:
        self.adapter = _choose_adapter()
        feats = self.adapter.features
        wanted = [
            f for f in ("shader-f16", "subgroup", "timestamp-query", "timestamp-query-inside-passes") if f in feats
        ]
        lim = self.adapter.limits
        limits = {
            k: lim[k]
            for k in (
                "max-storage-buffer-binding-size",
                "max-buffer-size",
                "max-storage-buffers-per-shader-stage",
                "max-compute-workgroup-storage-size",
                "max-compute-invocations-per-workgroup",
                "max-compute-workgroup-size-x",
                "max-compute-workgroup-size-y",
            )
            if k in lim
        }
        try:
            self.device = self.adapter.request_device_sync(required_features=wanted, required_limits=limits)
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"could not create a device on {self.adapter.info.get('device')}: {e}") from e
        self.queue = self.device.queue
        info = self.adapter.info
        dl = self.device.limits
        self.caps = DeviceCaps(
            name=str(info.get("device", "")),
            backend=str(info.get("backend_type", "")),
            shader_f16="shader-f16" in wanted,
            subgroups="subgroup" in wanted,
            subgroup_size=least_subgroup_size(info),
            timestamps="timestamp-query" in wanted,
            max_storage_binding=int(dl["max-storage-buffer-binding-size"]),
            max_storage_buffers_per_stage=int(dl["max-storage-buffers-per-shader-stage"]),
            max_workgroup_storage=int(dl["max-compute-workgroup-storage-size"]),
            max_invocations=int(dl["max-compute-invocations-per-workgroup"]),
            uniform_align=int(dl["min-uniform-buffer-offset-alignment"]),
            storage_align=int(dl["min-storage-buffer-offset-alignment"]),
            max_workgroups_per_dim=int(dl["max-compute-workgroups-per-dimension"]),
            driver=str(info.get("description", "")),
        )
        # what `wgjit tune` measured on this adapter (empty under WGJIT_AUTOTUNE=0 or without a cache)
        self.caps = replace(self.caps, tuning=load_table(self.caps))
        # kernel key -> (pipeline, bind-group layout), least recently used first; bounded because
        # every distinct shape class/dtype/width is a key and lavapipe keeps ~0.2 MB per pipeline.
        # Evicting never breaks a cached Program: it holds its own pipeline objects.
        self.pipelines: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        self.stats: Counter[str] = Counter()
        self.lock = threading.RLock()
        self.lost = False
        self._readback: dict[int, list[Any]] = {}  # free read-back staging buffers per size (staging_class)
        self._returned: deque[Any] = deque()  # staging buffers of lent arrays that died (LentRead), still mapped
        self._lent_bytes = 0  # the staging bytes lent to arrays not yet taken back
        self._spin_wait = _DEVICE_POLL is not None and self.adapter.info.get("adapter_type") != "CPU"
        self.uploads = UploadPool(UPLOAD_POOL_BYTES, UPLOAD_POOL_BUFFERS)
        # work for the host while it waits for a read-back (when_reading): weak references to callables
        self._while_reading: list[weakref.ref] = []

    # --- loss -----------------------------------------------------------------------
    def check_alive(self) -> None:
        if self.lost:
            raise DeviceError(LOST_HELP)
        if self is not _DEVICE:
            raise DeviceError(
                "this was made on a GPU device that tr.reset_device() has since replaced; tensors realized "
                "there are gone: recreate them (host data that was never uploaded carries over)"
            )

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn wgpu's errors after a device loss into DeviceError (and remember the loss).

        wgpu-py 0.32 has no device-lost promise: a lost or destroyed device shows up as a
        validation error ("Parent device is lost") on the next call, which is where we see it.
        """
        self.check_alive()
        try:
            yield
        except DeviceError:
            raise
        except Exception as e:
            if "lost" not in str(e).lower():
                raise
            self.lost = True
            raise DeviceError(f"{what}: {LOST_HELP}") from e

    # --- buffers -------------------------------------------------------------------

    def alloc(self, nbytes: int) -> DeviceBuffer:
        self.check_alive()
        size = _buffer_size(nbytes)
        if nbytes > self.caps.max_storage_binding:
            raise DeviceError(
                f"buffer of {nbytes} bytes exceeds the device's max storage binding of {self.caps.max_storage_binding} bytes"
            )
        self.stats["buffers_allocated"] += 1
        with self.guard("allocating a buffer"):
            return DeviceBuffer(self.device.create_buffer(size=size, usage=_USAGE), nbytes, self)

    def upload(self, array: np.ndarray, hint: Hashable | None = None) -> DeviceBuffer:
        """A new DeviceBuffer holding `array`; its GPU buffer a free one of the same size when the pool has one.

        `hint` names what the data is for (tracer.realize: a program and its input index): the
        buffer last uploaded for it is preferred, so a replay binds the same buffers (UploadPool).
        """
        raw = host_bytes(array)
        n = len(raw)
        size = _buffer_size(n)
        pooled = size <= UPLOAD_POOLED_MAX
        gpu = self.uploads.take(size, hint) if pooled else None
        if gpu is None:
            buf = self.alloc(n)
        else:
            self.check_alive()
            buf = DeviceBuffer(gpu, n, self)
            self.stats["uploads_reused"] += 1
        if pooled:
            self.uploads.hand_out(buf, hint)
        if raw:
            self.write(buf, raw)
        self.stats["uploads"] += 1
        return buf

    def copy_of(self, buf: DeviceBuffer) -> DeviceBuffer:
        """A new buffer holding `buf`'s bytes (a GPU copy, ordered after the work submitted before)."""
        new = self.alloc(buf.nbytes)  # a buffer of its own: the copy lands at its start
        with self.lock, self.guard("copying a buffer"):
            self._copy([(buf.buffer, buf.offset, new.buffer, (buf.nbytes + 3) & ~3)])
        return new

    def write(self, buf: DeviceBuffer, data: bytes | np.ndarray) -> None:
        """Copy host bytes into `buf` from its offset (queued: ordered after the work submitted before)."""
        self.write_raw(buf.buffer, buf.offset, data)

    def write_raw(self, gpu_buffer: Any, offset: int, data: bytes | np.ndarray) -> None:
        """Copy host bytes into a GPU buffer of this device at `offset` (a multiple of 4), queued.

        On wgpu-native a plain C call (a decode step makes two of these on the path the GPU waits on,
        and wgpu-py's wrapper costs more than the copy): the range is checked here, so the call
        cannot fail but for a lost device, which the next submission reports."""
        if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
            data = data.tobytes()
        n = len(data) if isinstance(data, bytes) else data.nbytes
        if n % 4:  # queue writes come in whole words
            data = (data if isinstance(data, bytes) else data.tobytes()) + b"\0" * (-n % 4)
            n += -n % 4
        if offset % 4 or offset < 0 or offset + n > gpu_buffer.size:
            raise ValueError(f"writing {n} bytes at offset {offset} of a {gpu_buffer.size}-byte buffer")
        if _WRITE_BUFFER is None:
            with self.guard("uploading data"):
                self.queue.write_buffer(gpu_buffer, offset, data)
            return
        self.check_alive()
        if n:
            _WRITE_BUFFER(self.queue._internal, gpu_buffer._internal, offset, _ffi.from_buffer(data), n)

    def read(self, buf: DeviceBuffer) -> bytes:
        """`buf`'s bytes, once the work submitted before has run."""
        out = np.empty(buf.nbytes, np.uint8)
        self.read_into(buf, out)
        return out.tobytes()

    def read_into(self, buf: DeviceBuffer, out: np.ndarray) -> None:
        """Copy `buf`'s first out.nbytes bytes into `out` (C-contiguous), once the work submitted before has run.

        Through a reused mappable staging buffer (a few per power-of-two size up to
        READBACK_KEPT_BYTES): a read allocates nothing once warm, and the bytes are copied
        once, from the mapped range straight into `out`. On H200 (benchmarks/device/readback.py,
        after ~2.6 ms of GPU work): 4 B in 2.67 ms and 6.3 MB in 3.41 ms, against wgpu-py's
        queue.read_buffer's 2.88 and 4.21 ms.
        """
        if out.nbytes == 0:
            return
        (pending,) = self.start_reads([(buf, out.nbytes)])
        self.finish_read(pending, out)

    def start_reads(self, reads: list[tuple[DeviceBuffer, int]]) -> list[PendingRead]:
        """Copy the first `n` bytes of each buffer into its own mappable staging buffer, in one
        submission ordered after the work submitted so far, and ask for the maps; finish_read
        waits for one. Work submitted later does not delay a read started here: a decode loop
        starts the read of token t, submits step t+1, then waits for token t only."""
        self.check_alive()
        stamp = READ_STAMP  # timeline (backend_wgpu.timeline): 0 read started, 1 copy submitted
        with self.lock, self.guard("reading a tensor back"):
            self._take_back_lent()
            copies, pending = [], []
            for buf, n in reads:
                buf.device.check_alive()  # a buffer of a replaced device
                size = (n + 3) & ~3
                assert 0 < n <= buf.nbytes
                staging = self._take_staging(size)
                copies.append((buf.buffer, buf.offset, staging, size))
                pending.append(PendingRead(staging, n, None, self))
            if stamp is not None:
                for p in pending:
                    stamp(0, p)
            self._copy(copies)
            for p in pending:
                p.promise = self._map_for_read(p.staging, (p.nbytes + 3) & ~3)
                if stamp is not None:
                    stamp(1, p)
            return pending

    def finish_read(self, pending: PendingRead, out: np.ndarray) -> None:
        """Wait for a started read (start_reads) and copy its bytes into `out` (C-contiguous, pending.nbytes)."""
        self.check_alive()
        assert out.flags.c_contiguous and out.nbytes == pending.nbytes and pending.device is self
        stamp = READ_STAMP  # timeline: 2 map done, 3 copied out
        with self.lock, self.guard("reading a tensor back"):
            raw = self._wait_mapped(pending)
            staging, size = pending.staging, (pending.nbytes + 3) & ~3
            try:
                if raw:
                    mapped = _ffi.buffer(_MAPPED_RANGE(staging._internal, 0, size), size)
                else:
                    mapped = staging.read_mapped(0, size, copy=False)
                _copy_bytes(out.reshape(-1).view(np.uint8), np.frombuffer(mapped, np.uint8, pending.nbytes))
                del mapped
            finally:
                if raw:
                    _UNMAP(staging._internal)
                else:
                    staging.unmap()
            if stamp is not None:
                stamp(3, pending)
            self._give_staging(staging)
            self.stats["reads"] += 1

    def read_array(
        self, buf: DeviceBuffer, shape: tuple[int, ...], dtype: Any, pending: PendingRead | None = None
    ) -> np.ndarray:
        """The first bytes of `buf` as a new C-contiguous array of `shape` and `dtype`, once the work
        submitted before has run (`pending`: finish that read, started by start_reads, instead).

        A read of LEND_MIN_BYTES or more is not copied: the array lies in its mapped staging buffer
        (LentRead), while the buffers so lent total at most LEND_READ_BYTES; a smaller read, or one
        past that budget, is copied into a new array."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if pending is None:
            if nbytes == 0:
                return np.empty(shape, dtype)
            (pending,) = self.start_reads([(buf, nbytes)])
        assert pending.nbytes == nbytes and pending.device is self
        size = pending.staging.size
        lend = (
            isinstance(pending.promise, RawMap)
            and nbytes >= LEND_MIN_BYTES
            and self._lent_bytes + size <= LEND_READ_BYTES
        )
        if not lend:
            out = np.empty(shape, dtype)
            self.finish_read(pending, out)
            return out
        self.check_alive()
        with self.lock, self.guard("reading a tensor back"):
            self._wait_mapped(pending)
            address = int(_ffi.cast("uintptr_t", _MAPPED_RANGE(pending.staging._internal, 0, (nbytes + 3) & ~3)))
            self._lent_bytes += size
            owner = LentRead(pending.staging, address, shape, dtype, self._returned)
            if READ_STAMP is not None:
                READ_STAMP(3, pending)
            self.stats["reads"] += 1
            self.stats["reads_lent"] += 1
            return np.asarray(owner)

    def _wait_mapped(self, pending: PendingRead) -> bool:
        """Wait until a started read's staging buffer is mapped (True: through a RawMap, by C calls)."""
        if pending.done:
            raise RuntimeError("finish_read: this read was finished already")
        pending.done = True
        raw = isinstance(pending.promise, RawMap)
        if raw:
            if self._while_reading:
                self._work_while_reading(pending.promise)
            self._wait_raw_map(pending.promise)
        else:
            pending.promise.sync_wait()
        if READ_STAMP is not None:
            READ_STAMP(2, pending)
        return raw

    def _take_back_lent(self) -> None:
        """Unmap the staging buffers whose lent arrays died (LentRead) and keep them for later reads."""
        while self._returned:
            staging = self._returned.popleft()
            self._lent_bytes -= staging.size
            if not self.lost:
                _UNMAP(staging._internal)
                self._give_staging(staging)

    def when_reading(self, task: weakref.ref) -> None:
        """Run `task()` (a weak reference to a callable) at the next read-back if it finds the GPU still
        busy, before waiting for it: host work that would otherwise delay the next call (a program
        records its next run's commands there, backend_wgpu.program). Once: the next read-back runs or
        drops it (a read that finds the GPU done would only be delayed by it); a dead reference is skipped."""
        if task not in self._while_reading:
            self._while_reading.append(task)

    def _work_while_reading(self, read: RawMap) -> None:
        tasks, self._while_reading = self._while_reading, []
        _DEVICE_POLL(self.device._internal, False, _NULL)  # without waiting: is the read's copy done?
        if read.status is not None:
            return  # yes: the caller is waiting for nothing else
        for ref in tasks:
            task = ref()
            if task is not None:
                task()

    def _copy(self, copies: list[tuple[Any, int, Any, int]]) -> None:
        """Submit, in one command buffer, copies of (source, offset, target, size): `size` bytes from
        `source` at `offset` to the start of `target` (GPU buffers)."""
        if _DEVICE_POLL is None:
            encoder = self.device.create_command_encoder()
            for source, offset, target, size in copies:
                encoder.copy_buffer_to_buffer(source, offset, target, 0, size)
            self.queue.submit([encoder.finish()])
            return
        held = _ffi.new("WGPUCommandBuffer[1]")
        encoder = _CREATE_ENCODER(self.device._internal, _ENCODER_DESC)
        try:
            for source, offset, target, size in copies:
                _COPY(encoder, source._internal, offset, target._internal, 0, size)
            held[0] = _FINISH(encoder, _COMMANDS_DESC)
        finally:
            _RELEASE_ENCODER(encoder)
        try:
            _SUBMIT(self.queue._internal, 1, held)
        finally:
            _RELEASE_COMMANDS(held[0])

    @staticmethod
    def _map_for_read(staging: Any, size: int) -> Any:
        """Ask for `staging` mapped for reading: a RawMap on wgpu-native (see there), else wgpu-py's
        promise. (wgpu-py 0.32 submits an empty command buffer before a read map of a buffer not mapped
        since, a workaround for maps right after creation; the copy into it was just submitted, so its
        internal mode without that submission suffices.)"""
        if _DEVICE_POLL is not None:
            raw, key = RawMap(), next(_MAP_KEYS)
            info = _ffi.new("WGPUBufferMapCallbackInfo *")
            info.mode = _PROCESS_EVENTS
            info.callback = _map_called_back
            info.userdata1 = _ffi.cast("void *", key)
            _MAPS[key] = raw
            _MAP_ASYNC(staging._internal, _MAP_READ, 0, size, info[0])
            return raw
        try:
            return staging.map_async("READ_NOSYNC", 0, size)
        except (ValueError, KeyError, TypeError, AttributeError):  # a wgpu-py without that mode
            return staging.map_async(wgpu.MapMode.READ, 0, size)

    def _wait_raw_map(self, raw: RawMap) -> None:
        """Poll the device on this thread until `raw`'s callback has run; raise if the map failed.

        On a GPU without blocking: a blocking wait sleeps in the driver and wakes up to ~1 ms late,
        more than a whole decode step's GPU time (benchmarks/device/readback.py). On a CPU adapter
        blocking: spinning would take a core from the driver that is doing the work."""
        handle, block = self.device._internal, not self._spin_wait
        while raw.status is None:
            _DEVICE_POLL(handle, block, _NULL)
        if raw.status != _MAP_SUCCESS:
            raise RuntimeError(f"reading a tensor back: mapping its staging buffer failed ({raw.status}: {raw.error})")

    def drop_readback(self) -> None:
        """Free the kept read-back staging buffers (the next reads make new ones)."""
        with self.lock:
            self._take_back_lent()
            for kept in self._readback.values():
                for staging in kept:
                    staging.destroy()
            self._readback.clear()

    def _take_staging(self, size: int) -> Any:
        """A mappable buffer of at least `size` bytes: a kept one of its size class, else a new one."""
        cls = staging_class(size)
        kept = self._readback.get(cls)
        if kept:
            return kept.pop()
        usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        if cls > READBACK_KEPT_BYTES:  # too large to keep: exactly the size, destroyed after the read
            return self.device.create_buffer(size=size, usage=usage)
        return self.device.create_buffer(size=cls, usage=usage)

    def _give_staging(self, staging: Any) -> None:
        """Keep a staging buffer whose read is done for the next read of its size class (a few per class)."""
        cls = staging.size
        if cls > READBACK_KEPT_BYTES or staging_class(cls) != cls:
            staging.destroy()
            return
        kept = self._readback.setdefault(cls, [])
        if len(kept) < READBACK_KEPT_PER_SIZE:
            kept.append(staging)
        else:
            staging.destroy()

    # --- pipelines -----------------------------------------------------------------
    def pipeline(self, key: str, code: str, layout_entries: list[dict], unchecked: bool = False) -> tuple[Any, Any]:
        """The compute pipeline and bind-group layout for a kernel, compiled once.

        Cached by the WGSL text itself: the kernel key names the kernel for people, the
        source decides what runs, so a key that forgot a specialization cannot alias.
        Comments are left out of the cache key: a fused kernel's comments name the nodes it
        holds, and two groups that differ only there are one pipeline. `unchecked` (a kernel
        whose indices are in range by construction: Kernel.unchecked) compiles without the
        bounds clamps (trusted_module).
        """
        unchecked = unchecked and trusted_shaders_enabled()
        cache_key = ("unchecked:" if unchecked else "") + _WGSL_COMMENT.sub("", code)
        hit = self.pipelines.get(cache_key)
        if hit is not None:
            self.pipelines.move_to_end(cache_key)
            self.stats["pipeline_cache_hits"] += 1
            return hit
        self.check_alive()
        try:
            module = trusted_module(self.device, code) if unchecked else None
            if module is None:
                module = self.device.create_shader_module(code=code)
            else:
                self.stats["unchecked_modules"] += 1
            bgl = self.device.create_bind_group_layout(entries=layout_entries)
            layout = self.device.create_pipeline_layout(bind_group_layouts=[bgl])
            pipeline = self.device.create_compute_pipeline(
                layout=layout, compute={"module": module, "entry_point": "main"}
            )
        except Exception as e:  # noqa: BLE001  wgpu raises its own validation errors
            if "lost" in str(e).lower():  # not the kernel's fault: the device is gone
                self.lost = True
                raise DeviceError(f"compiling kernel {key}: {LOST_HELP}") from e
            raise KernelCompileError(f"kernel {key} failed to compile: {e}\n--- WGSL ---\n{code}", key, code) from e
        self.stats["pipelines_compiled"] += 1
        self.pipelines[cache_key] = (pipeline, bgl)
        while len(self.pipelines) > MAX_CACHED_PIPELINES:
            self.pipelines.popitem(last=False)
            self.stats["pipelines_evicted"] += 1
        return pipeline, bgl


def _buffer_size(nbytes: int) -> int:
    """The GPU buffer size for a tensor of `nbytes`: whole words, 16 at least (a vec4 binding of an empty tensor must still validate)."""
    return max(16, (nbytes + 3) & ~3)


_WGSL_COMMENT = re.compile(r"//[^\n]*")
_FORCE_LOOP_BOUNDING = 2  # WGPUShaderRuntimeChecks_ForceLoopBounding: loops stay bounded, indices unclamped


def trusted_shaders_enabled() -> bool:
    """WGJIT_TRUSTED_SHADERS=0 compiles every kernel with wgpu's bounds clamps."""
    return os.environ.get("WGJIT_TRUSTED_SHADERS", "1").strip() != "0"


def trusted_module(device: Any, code: str) -> Any:
    """A shader module without the clamp wgpu puts on every array index (wgpu-native's
    wgpuDeviceCreateShaderModuleTrusted), or None where this wgpu lacks it.

    In a GEMM's inner loop each workgroup-memory read otherwise carries an add and a min the
    compiler cannot fold into the load. Only kernels whose every index is in range by
    construction ask for it (Kernel.unchecked): an index out of range here reads or writes
    memory it should not, where the clamped module would have read a wrong element.
    """
    try:
        from wgpu.backends.wgpu_native._api import GPUShaderModule, ffi, lib, libf, new_struct_p, to_c_string_view

        create = libf.wgpuDeviceCreateShaderModuleTrusted
    except (ImportError, AttributeError):
        return None
    source = new_struct_p("WGPUShaderSourceWGSL *", code=to_c_string_view(code))
    source[0].chain.next = ffi.NULL
    source[0].chain.sType = lib.WGPUSType_ShaderSourceWGSL
    chained = ffi.cast("WGPUChainedStruct *", source)
    descriptor = new_struct_p("WGPUShaderModuleDescriptor *", nextInChain=chained, label=to_c_string_view("wgjit"))
    handle = create(device._internal, descriptor, _FORCE_LOOP_BOUNDING)
    if handle == ffi.NULL:
        raise RuntimeError("shader module creation failed")
    return GPUShaderModule("wgjit", handle, device)


_DEVICE: Device | None = None
_DEVICE_LOCK = threading.Lock()


def get_device() -> Device:
    global _DEVICE
    with _DEVICE_LOCK:
        if _DEVICE is None:
            _DEVICE = Device()
        return _DEVICE


def device_if_created() -> Device | None:
    return _DEVICE


def reset_device() -> None:
    """Forget the current device (after a loss); the next use creates a new one.

    Users call tracer.reset_device(), which also drops what was compiled for this one.
    """
    global _DEVICE
    with _DEVICE_LOCK:
        _DEVICE = None
