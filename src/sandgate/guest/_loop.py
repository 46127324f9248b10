"""The guest's event loop: the small part of an event loop the daemon needs, without asyncio.

Why not asyncio: it is most of the guest's start-up (~40 of ~76 ms of imports in a sandbox,
~4 MiB of its memory), and every sandbox pays it before its first command and for as long as
it lives. The daemon needs far less: readiness callbacks on a few file descriptors, timers,
a signal or two, and ``async def`` code that waits on futures. This module is that subset,
written from the contract of ``selectors`` over one ``select.epoll``, ``heapq`` and
``time.monotonic``; like the rest of the daemon's start it imports only modules built into
the interpreter (``_lean`` says why), so no ``selectors``, ``socket`` or ``signal``.

Shape: one loop per process (:func:`run` makes it current, :func:`get_loop` returns it), and
*no threads*, so the daemon may fork. Callbacks run one at a time from the ready queue; one
that raises is logged and the loop goes on. A :class:`Task` drives a coroutine with
``send``; the coroutine waits by awaiting a :class:`Future`, which yields it to the task.
Cancelling a task cancels the future it waits on, so :class:`Cancelled` is raised at the
``await`` (and propagates into a task it awaits). A task that fails while nothing awaits it
logs its exception (``task_failed``); nothing is lost silently.

Signals (:meth:`Loop.add_signal_handler`) arrive through ``set_wakeup_fd``: the
Python-level handler does nothing, the kernel's wakeup byte interrupts the selector, and the
loop runs the callback between other callbacks, never in the middle of one.
"""

from __future__ import annotations

import _socket
import errno
import heapq
import os
import select
import time

from ._lean import accept, suppress
from ._log import log

# The daemon's start imports no ``typing`` (~0.5 MiB of every idle sandbox, ~4 ms): its guest
# modules annotate lazily (``from __future__ import annotations``) and import their types
# under a ``TYPE_CHECKING`` of their own, which mypy treats like ``typing.TYPE_CHECKING``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from collections import deque
    from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
    from typing import Any, Generic, TypeVar

    T = TypeVar("T")

    class _Generic(Generic[T]):
        """``Future``'s generic base for the type checker."""

else:
    import _signal  # ``signal`` without its enums
    from _collections import deque  # what ``collections`` re-exports, without its imports

    T = None

    class _Generic:
        """At run time ``Future[T]`` (a base class below) is plain ``Future``."""

        __slots__ = ()

        def __class_getitem__(cls, item: object) -> type:
            return cls


__all__ = [
    "BufferedSender",
    "Cancelled",
    "Event",
    "Future",
    "Handle",
    "Lock",
    "Loop",
    "Task",
    "accept_forever",
    "close_socket",
    "get_loop",
    "readable",
    "run",
    "sleep",
    "sock_accept",
    "sock_connect",
    "sock_recv",
    "sock_sendall",
    "spawn",
    "wait_first",
    "wait_for",
    "writable",
]

_current: Loop | None = None
_UNIX_CONNECT_TRIES = 100


class Cancelled(BaseException):
    """Raised at the ``await`` of a cancelled task or future. A ``BaseException`` so that
    ``except Exception`` in request handlers never swallows a cancellation."""


class Handle:
    """A scheduled callback; :meth:`cancel` keeps it from running."""

    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self.when = when
        self.callback: Callable[..., object] = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: Handle) -> bool:
        return self.when < other.when


class Loop:
    """Ready queue, timer heap and a selector; see the module docstring."""

    def __init__(self) -> None:
        self._selector = select.epoll()
        self._ready: deque[Handle] = deque()
        self._timers: list[Handle] = []
        #: fd -> [reader handle, writer handle]
        self._fds: dict[int, list[Handle | None]] = {}
        self._signals: dict[int, Handle] = {}
        self._wake_r: _socket.socket | None = None
        self._wake_w: _socket.socket | None = None
        self._stopped = False

    # ---- time and callbacks

    def time(self) -> float:
        return time.monotonic()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Handle:
        handle = Handle(0.0, callback, args)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Handle:
        handle = Handle(self.time() + max(delay, 0.0), callback, args)
        heapq.heappush(self._timers, handle)
        return handle

    def create_future(self) -> Future[Any]:
        return Future(self)

    # ---- file descriptors

    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> Handle:
        """Calls ``callback(*args)`` whenever ``fd`` is readable (replacing its reader)."""
        return self._watch(fd, 0, Handle(0.0, callback, args))

    def add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> Handle:
        return self._watch(fd, 1, Handle(0.0, callback, args))

    def remove_reader(self, fd: int, handle: Handle | None = None) -> bool:
        """Stops watching ``fd`` for reading; with ``handle``, only if that is still the
        reader (a waiter finishing late never removes a newer watcher of a reused fd)."""
        return self._unwatch(fd, 0, handle)

    def remove_writer(self, fd: int, handle: Handle | None = None) -> bool:
        return self._unwatch(fd, 1, handle)

    def forget_fd(self, fd: int) -> None:
        """Drops every watcher of ``fd``: call it before closing a watched fd."""
        self._unwatch(fd, 0)
        self._unwatch(fd, 1)

    def _events(self, slots: list[Handle | None]) -> int:
        return (select.EPOLLIN if slots[0] else 0) | (select.EPOLLOUT if slots[1] else 0)

    def _watch(self, fd: int, slot: int, handle: Handle) -> Handle:
        slots = self._fds.get(fd)
        if slots is None:
            slots = [None, None]
            slots[slot] = handle
            self._selector.register(fd, self._events(slots))
            self._fds[fd] = slots
            return handle
        old = slots[slot]
        if old is not None:
            old.cancel()
        slots[slot] = handle
        try:
            self._selector.modify(fd, self._events(slots))
        except (OSError, KeyError, ValueError):
            # A stale record: the fd was closed while watched and its number reused. Start
            # the new fd afresh; the old watchers belonged to a file that is gone.
            for stale in slots:
                if stale is not None and stale is not handle:
                    stale.cancel()
            with suppress(KeyError, ValueError, OSError):
                self._selector.unregister(fd)
            slots = [None, None]
            slots[slot] = handle
            self._selector.register(fd, self._events(slots))
            self._fds[fd] = slots
        return handle

    def _unwatch(self, fd: int, slot: int, only: Handle | None = None) -> bool:
        slots = self._fds.get(fd)
        if slots is None or slots[slot] is None:
            return False
        handle = slots[slot]
        assert handle is not None
        if only is not None and handle is not only:
            return False
        handle.cancel()
        slots[slot] = None
        events = self._events(slots)
        try:
            if events:
                self._selector.modify(fd, events)
            else:
                del self._fds[fd]
                self._selector.unregister(fd)
        except (OSError, ValueError, KeyError):
            # The fd was closed under us: epoll already forgot it. Drop our record too.
            self._fds.pop(fd, None)
            with suppress(KeyError, ValueError, OSError):
                self._selector.unregister(fd)
        return True

    # ---- signals

    def add_signal_handler(self, sig: int, callback: Callable[..., object], *args: Any) -> None:
        """Runs ``callback`` on the loop after ``sig`` arrives (coalesced, like the kernel)."""
        if self._wake_r is None:
            self._wake_r, self._wake_w = _socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            _signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
            self.add_reader(self._wake_r.fileno(), self._on_signals)
        self._signals[sig] = Handle(0.0, callback, args)
        _signal.signal(sig, _ignore_signal)

    def _on_signals(self) -> None:
        assert self._wake_r is not None
        try:
            data = self._wake_r.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        for number in dict.fromkeys(data):  # once each, in arrival order
            handle = self._signals.get(number)
            if handle is not None:
                self._ready.append(Handle(0.0, handle.callback, handle.args))

    # ---- running

    def stop(self) -> None:
        self._stopped = True

    def run_until_complete(self, future: Future[T]) -> T:
        future.add_done_callback(lambda _: self.stop())
        self._stopped = False
        while not self._stopped:
            self._run_once()
        return future.result()

    def _run_once(self) -> None:
        timeout: float | None = None
        if self._ready:
            timeout = 0.0
        elif self._timers:
            timeout = max(0.0, self._timers[0].when - self.time())
        # As ``selectors`` reads epoll: an error or hang-up wakes both the reader and the
        # writer, whose next call meets it. CPython rounds a timeout up to whole ms.
        for fd, mask in self._selector.poll(-1 if timeout is None else timeout):
            slots = self._fds.get(fd)
            if slots is None:
                continue
            if mask & ~select.EPOLLOUT and slots[0] is not None:
                self._ready.append(slots[0])
            if mask & ~select.EPOLLIN and slots[1] is not None:
                self._ready.append(slots[1])
        now = self.time()
        while self._timers and self._timers[0].when <= now:
            handle = heapq.heappop(self._timers)
            if not handle.cancelled:
                self._ready.append(handle)
        # Only what is ready now: callbacks scheduled by these run on the next round, so
        # a busy fd cannot starve the selector or the timers.
        for _ in range(len(self._ready)):
            handle = self._ready.popleft()
            if handle.cancelled:
                continue
            try:
                handle.callback(*handle.args)
            except Exception as exc:
                log("callback_failed", callback=repr(handle.callback), error=repr(exc))

    def close(self) -> None:
        for sig in self._signals:
            with suppress(OSError, ValueError):
                _signal.signal(sig, _signal.SIG_DFL)
        self._signals.clear()
        if self._wake_r is not None:
            with suppress(ValueError):
                _signal.set_wakeup_fd(-1)
            self.remove_reader(self._wake_r.fileno())
            self._wake_r.close()
            assert self._wake_w is not None
            self._wake_w.close()
            self._wake_r = self._wake_w = None
        self._selector.close()


def _ignore_signal(signum: int, frame: object) -> None:
    """The Python-level handler: the work happens on the loop (wakeup fd)."""


class Future(_Generic[T]):
    """A result that arrives later. ``await future`` waits for it in a :class:`Task`."""

    def __init__(self, loop: Loop | None = None) -> None:
        self._loop = loop if loop is not None else get_loop()
        self._done = False
        self._cancelled = False
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], object]] = []
        #: Set when a task or a waiter awaits this future (for ``task_failed`` logging).
        self._awaited = False

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("the future is not done")
        if self._cancelled:
            raise Cancelled
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[no-any-return]

    def exception(self) -> BaseException | None:
        if not self._done:
            raise RuntimeError("the future is not done")
        if self._cancelled:
            raise Cancelled
        return self._exception

    def set_result(self, result: T) -> None:
        if self._done:
            raise RuntimeError("the future is already done")
        self._result = result
        self._finish()

    def set_exception(self, exception: BaseException) -> None:
        if self._done:
            raise RuntimeError("the future is already done")
        self._exception = exception
        self._finish()

    def cancel(self) -> bool:
        if self._done:
            return False
        self._cancelled = True
        self._finish()
        return True

    def _finish(self) -> None:
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._loop.call_soon(callback, self)

    def add_done_callback(self, callback: Callable[[Future[T]], object]) -> None:
        if self._done:
            self._loop.call_soon(callback, self)
        else:
            self._callbacks.append(callback)

    def remove_done_callback(self, callback: Callable[[Future[T]], object]) -> None:
        with suppress(ValueError):
            self._callbacks.remove(callback)

    def __await__(self) -> Generator[Future[T], None, T]:
        if not self._done:
            self._awaited = True
            yield self
        return self.result()


class Task(Future[T]):
    """Runs a coroutine on the loop; done when the coroutine returns or raises."""

    def __init__(self, coro: Coroutine[Any, Any, T], loop: Loop | None = None) -> None:
        super().__init__(loop)
        self._coro = coro
        self._waiting: Future[Any] | None = None
        self._must_cancel = False
        self._loop.call_soon(self._step)

    def cancel(self) -> bool:
        """Asks the coroutine to stop: :class:`Cancelled` is raised at its ``await``."""
        if self._done:
            return False
        waiting = self._waiting
        if waiting is not None and waiting.cancel():
            return True  # the wake-up raises Cancelled out of the await
        self._must_cancel = True
        return True

    def _step(self, _: Future[Any] | None = None) -> None:
        if self._done:
            return
        self._waiting = None
        try:
            if self._must_cancel:
                self._must_cancel = False
                yielded = self._coro.throw(Cancelled())
            else:
                yielded = self._coro.send(None)
        except StopIteration as stop:
            self.set_result(stop.value)
        except Cancelled:
            Future.cancel(self)
        except BaseException as exc:
            self.set_exception(exc)
            if not self._awaited and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                log("task_failed", coroutine=repr(self._coro), error=repr(exc))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            if not isinstance(yielded, Future):
                self._coro.close()
                self.set_exception(TypeError(f"a guest task awaited {yielded!r}, not a Future"))
                return
            self._waiting = yielded
            yielded._awaited = True
            yielded.add_done_callback(self._step)


def get_loop() -> Loop:
    if _current is None:
        raise RuntimeError("no guest loop is running")
    return _current


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Runs ``coro`` on a new loop until it is done, then closes the loop."""
    global _current
    loop = Loop()
    _current = loop
    try:
        return loop.run_until_complete(Task(coro, loop))
    finally:
        _current = None
        loop.close()


def spawn(coro: Coroutine[Any, Any, T]) -> Task[T]:
    return Task(coro)


async def sleep(delay: float) -> None:
    future: Future[None] = Future()
    handle = future._loop.call_later(delay, _resolve, future)
    try:
        await future
    finally:
        handle.cancel()


async def wait_for(aw: Awaitable[T], seconds: float) -> T:
    """``await aw`` for at most ``seconds``: then it is cancelled and
    ``TimeoutError`` raised. Cancelling the caller cancels ``aw`` too."""
    task: Future[T] = aw if isinstance(aw, Future) else Task(_as_coroutine(aw))
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = task._loop.call_later(seconds, expire)
    try:
        return await task
    except Cancelled:
        if expired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


async def _as_coroutine(aw: Awaitable[T]) -> T:
    return await aw


async def wait_first(futures: Iterable[Future[Any]]) -> None:
    """Returns as soon as one of ``futures`` is done; cancels none of them (cancelling the
    caller only stops the waiting)."""
    pending = list(futures)
    if any(f.done() for f in pending):
        return
    waiter: Future[None] = Future()

    def wake(_: Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in pending:
        future._awaited = True
        future.add_done_callback(wake)
    try:
        await waiter
    finally:
        for future in pending:
            future.remove_done_callback(wake)


def _resolve(future: Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Event:
    """A flag tasks can wait for."""

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[Future[None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    async def wait(self) -> None:
        if self._set:
            return
        waiter: Future[None] = Future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            with suppress(ValueError):
                self._waiters.remove(waiter)


class Lock:
    """Mutual exclusion between tasks, first come first served."""

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[Future[None]] = deque()

    def locked(self) -> bool:
        return self._locked

    async def acquire(self) -> None:
        if not self._locked and not self._waiters:
            self._locked = True
            return
        waiter: Future[None] = Future()
        self._waiters.append(waiter)
        try:
            await waiter
        except Cancelled:
            if waiter.done() and not waiter.cancelled():
                self._wake_next()  # the lock was handed to us as we were cancelled
            raise
        finally:
            with suppress(ValueError):
                self._waiters.remove(waiter)

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("the lock is not held")
        self._wake_next()

    def _wake_next(self) -> None:
        """Hands the lock to the first live waiter, or unlocks it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # stays locked: ownership passes to the waiter
                return
        self._locked = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


# ---- readiness and sockets (all sockets here are non-blocking)


async def readable(fd: int) -> None:
    """Waits until ``fd`` is readable (or at end of file, or in error)."""
    loop = get_loop()
    ready: Future[None] = Future(loop)
    handle = loop.add_reader(fd, _resolve, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd, handle)


async def writable(fd: int) -> None:
    loop = get_loop()
    ready: Future[None] = Future(loop)
    handle = loop.add_writer(fd, _resolve, ready)
    try:
        await ready
    finally:
        loop.remove_writer(fd, handle)


async def sock_recv(sock: _socket.socket, size: int) -> bytes:
    while True:
        try:
            return sock.recv(size)
        except (BlockingIOError, InterruptedError):
            await readable(sock.fileno())


async def sock_sendall(sock: _socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except (BlockingIOError, InterruptedError):
            await writable(sock.fileno())


async def sock_accept(listener: _socket.socket) -> tuple[_socket.socket, Any]:
    """Accepts one connection; the new socket is non-blocking (and close-on-exec)."""
    while True:
        try:
            conn, address = accept(listener)
        except (BlockingIOError, InterruptedError):
            await readable(listener.fileno())
            continue
        conn.setblocking(False)
        return conn, address


async def accept_forever(
    listener: _socket.socket,
    handle: Callable[[_socket.socket], Coroutine[Any, Any, None]],
    tasks: set[Task[None]],
    failure_event: str,
) -> None:
    """Accepts connections until cancelled and runs ``handle(conn)`` for each as a task held
    in ``tasks`` until it ends. A failing accept (EMFILE and friends) is logged as
    ``failure_event`` and retried after 0.1 s instead of spinning."""
    while True:
        try:
            conn, _ = await sock_accept(listener)
        except OSError as exc:
            log(failure_event, error=str(exc))
            await sleep(0.1)
            continue
        task = spawn(handle(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def sock_connect(sock: _socket.socket, address: Any) -> None:
    """Connects a non-blocking socket; raises ``OSError`` as ``connect`` would."""
    if sock.family == _socket.AF_UNIX:
        # A Unix socket's EAGAIN means "backlog full, nothing queued": try again shortly.
        for _ in range(_UNIX_CONNECT_TRIES):
            try:
                sock.connect(address)
                return
            except (BlockingIOError, InterruptedError):
                await sleep(0.01)
        raise BlockingIOError(errno.EAGAIN, "the listener's backlog stays full")
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    await writable(sock.fileno())
    error = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))


def close_socket(sock: _socket.socket) -> None:
    """Closes ``sock`` after dropping the loop's watchers of it (see :meth:`Loop.forget_fd`)."""
    fd = sock.fileno()
    if fd >= 0 and _current is not None:
        _current.forget_fd(fd)
    sock.close()


class BufferedSender:
    """Writes frames to a non-blocking socket without waiting: what the socket does not take
    now is buffered and sent as it drains. The caller bounds the buffer (:attr:`pending`, the
    daemon pauses a process's output above a high-water mark and drops a reader that stalls);
    a peer that errors closes only this sender."""

    def __init__(self, sock: _socket.socket) -> None:
        self._loop = get_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._buffer = bytearray()
        self._flushed: list[Future[None]] = []
        self.closed = False
        #: Done once the sender is closed (by :meth:`abort`, a failed send, or :meth:`close`).
        self.lost: Future[None] = Future(self._loop)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if not self._buffer:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.abort()
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._on_writable)
        self._buffer += data

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.abort()
            return
        del self._buffer[:sent]
        if not self._buffer:
            self._loop.remove_writer(self._fd)
            self._wake(None)

    def _wake(self, error: BaseException | None) -> None:
        waiters, self._flushed = self._flushed, []
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    async def drain(self) -> None:
        """Waits until everything written was handed to the kernel; ``ConnectionError`` if
        the sender was aborted first."""
        if self.closed:
            raise ConnectionResetError("the connection is closed")
        if not self._buffer:
            return
        waiter: Future[None] = Future(self._loop)
        self._flushed.append(waiter)
        await waiter

    async def close(self, seconds: float) -> None:
        """Sends what is buffered, then closes; aborts if the peer does not read it within
        ``seconds``."""
        with suppress(TimeoutError, OSError):
            await wait_for(self.drain(), seconds)
        self.abort()

    def abort(self) -> None:
        """Closes now, dropping what is buffered."""
        if self.closed:
            return
        self.closed = True
        self._buffer.clear()
        self._loop.forget_fd(self._fd)
        self._sock.close()
        self._wake(ConnectionResetError("the connection was closed"))
        _resolve(self.lost)
