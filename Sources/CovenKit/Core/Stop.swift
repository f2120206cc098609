import Foundation

// MARK: - The one way to ask a long call to stop

/// The signal that asked this process to stop (0 while none has). Set only by the handler
/// ``Stop/installSignalHandlers(cooperative:message:)`` installs, read by ``Stop/process``.
///
/// These three are the only process-wide mutable state coven has, as a signal handler needs:
/// the handler may touch nothing but `sig_atomic_t` values and `write(2)`/`_exit(2)`.
nonisolated(unsafe) private var caughtSignal: sig_atomic_t = 0
/// Whether the running command polls ``Stop/process`` (the first signal only asks it to stop).
nonisolated(unsafe) private var stopsCooperatively: sig_atomic_t = 0
/// The one line written to stderr when a signal ends the process at once (NUL-terminated).
nonisolated(unsafe) private var stopLine: UnsafeMutablePointer<CChar>?
/// Posted by the handler (`sem_post` is async-signal-safe): wakes the watchdog of a cooperative
/// command, which ends the process when the command does not stop in time.
nonisolated(unsafe) private var stopPosted = sem_t()

/// A request to stop a long call (a read, a staging, an upload run, a fetch, a
/// make-device-only call), set by a signal or by another thread, polled by the call between
/// its steps: the call throws `.interrupted` and keeps what it finished.
///
/// ``process`` follows this process's SIGINT, SIGTERM and SIGHUP once the CLI installed its
/// handlers; a fresh `Stop()` is set only by ``request(_:)`` (tests, library callers).
public final class Stop: @unchecked Sendable {
    // @unchecked: `asked` is only used under `lock`; the signal state is a sig_atomic_t.
    private let lock = NSLock()
    private var asked: String?
    private let followsSignals: Bool
    private let condition: (@Sendable () -> Bool)?

    /// A token no signal sets.
    public init() {
        followsSignals = false
        condition = nil
    }

    /// A token asked to stop once `condition` holds, which is evaluated on every poll (a
    /// deadline, or a test that stops a call after so many steps).
    public init(when condition: @escaping @Sendable () -> Bool) {
        followsSignals = false
        self.condition = condition
    }

    private init(followingSignals: Void) {
        followsSignals = true
        condition = nil
    }

    /// The process's token: set by SIGINT, SIGTERM or SIGHUP after
    /// ``installSignalHandlers(cooperative:message:)``, or by ``request(_:)``.
    public static let process = Stop(followingSignals: ())

    /// Asks the call to stop; the first reason given is kept.
    public func request(_ reason: String) {
        lock.lock()
        defer { lock.unlock() }
        if asked == nil { asked = reason }
    }

    /// Why a stop was asked, or nil while none was.
    public var reason: String? {
        if followsSignals, let name = Stop.caughtSignalName { return "interrupted by \(name)" }
        lock.lock()
        defer { lock.unlock() }
        if asked == nil, let condition, condition() { asked = "asked to stop" }
        return asked
    }

    /// Whether a stop was asked.
    public var isRequested: Bool { reason != nil }

    /// Throws `.interrupted` once a stop was asked.
    ///
    /// - Parameter what: the call, for the message (`make-device-only`, `the read`).
    /// - Throws: `.interrupted`, naming the signal or the reason.
    public func check(_ what: String = "the command") throws {
        if let reason { throw CovenError(.interrupted, "\(what) stopped: \(reason)") }
    }

    // MARK: Signals

    /// The name of the signal that asked this process to stop, if one did.
    static var caughtSignalName: String? {
        switch caughtSignal {
        case 0: return nil
        case SIGINT: return "SIGINT"
        case SIGTERM: return "SIGTERM"
        case SIGHUP: return "SIGHUP"
        default: return "signal \(caughtSignal)"
        }
    }

    /// Whether a signal asked this process to stop: for code that has no token at hand, such as
    /// a storage request in flight (libcurl's progress callback polls it, so a stalled request
    /// ends within a second).
    public static var signalled: Bool { caughtSignal != 0 }

    /// Installs the one handler of SIGINT, SIGTERM and SIGHUP every command runs under.
    ///
    /// A `cooperative` command polls ``process`` (a read, a staging, an upload run): the first
    /// signal asks it to stop, so it finishes the step in hand, removes its temporary files and
    /// reports `.interrupted`; a second one ends the process at once. Any other command is
    /// ended at once by the first. Ending at once writes `message` (one line) to stderr and
    /// exits with status 130; what the command committed stays, and nothing it left half done
    /// is taken for done (every change is one transaction).
    ///
    /// System calls the signal interrupts fail with EINTR instead of restarting, so a read
    /// waiting on a pipe or a lock notices the request.
    ///
    /// A cooperative command that has not ended ``stopGrace`` seconds after the first signal
    /// (a thread blocked in a read that no signal interrupts: a hung NAS, a FIFO) is ended
    /// then by a watchdog, with `forcedMessage(signal name)` on stderr and status 130: every
    /// signal ends a command with 130 `interrupted`.
    public static func installSignalHandlers(cooperative: Bool, message: String,
                                             forcedMessage: @escaping @Sendable (String) -> String = { _ in "" }) {
        let line = strdup(message)
        stopLine = line
        stopsCooperatively = cooperative ? 1 : 0
        if cooperative {
            sem_init(&stopPosted, 0, 0)
            let grace = stopGrace
            let watchdog = Thread {
                while sem_wait(&stopPosted) != 0 {}
                Thread.sleep(forTimeInterval: grace)
                let text = forcedMessage(Stop.caughtSignalName ?? "a signal")
                if text.isEmpty {
                    if let line = stopLine { _ = write(2, line, strlen(line)) }
                } else {
                    text.withCString { _ = write(2, $0, strlen($0)) }
                }
                _exit(130)
            }
            watchdog.start()
        }
        for number in [SIGINT, SIGTERM, SIGHUP] {
            signal(number) { number in
                if caughtSignal != 0 || stopsCooperatively == 0 {
                    if let line = stopLine { _ = write(2, line, strlen(line)) }
                    _exit(130)
                }
                caughtSignal = number
                sem_post(&stopPosted)
            }
            siginterrupt(number, 1)
        }
    }

    /// How long a cooperative command has to stop after the first signal before the watchdog
    /// ends it: 10 seconds, or `COVEN_STOP_GRACE` seconds.
    static var stopGrace: Double {
        ProcessInfo.processInfo.environment["COVEN_STOP_GRACE"].flatMap(Double.init).map { max(0, $0) } ?? 10
    }

    /// Sleeps `seconds`, waking early (and returning false) once a stop is asked.
    ///
    /// - Returns: true when the whole time passed.
    public func sleep(_ seconds: Double) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while !isRequested {
            let left = end.timeIntervalSinceNow
            if left <= 0 { return true }
            Thread.sleep(forTimeInterval: min(left, 0.05))
        }
        return false
    }
}
