import Foundation

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Child processes without Foundation's run loop

/// Starts and waits for child processes with `posix_spawn` and `waitpid`.
///
/// Foundation's `Process.waitUntilExit()` on Linux spins a run loop and was seen to hang for
/// good once the child had exited (a shell script that left a server running behind it), so the
/// test support never relies on it.
public enum Spawn {
    /// A started child.
    public struct Child: Sendable {
        public let pid: pid_t
    }

    /// Starts `executable` (an absolute path) with its standard streams on the given files
    /// (`/dev/null` when nil; output files are created or truncated).
    ///
    /// - Parameters:
    ///   - environment: the child's whole environment; the parent's when nil.
    ///   - directory: the working directory; the parent's when nil.
    /// - Throws: ``SpawnError`` when the program cannot start.
    public static func start(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        directory: String? = nil, stdin: String? = nil, stdout: String? = nil, stderr: String? = nil
    ) throws -> Child {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A fresh signal mask and default dispositions: the test runner may block signals.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        // glibc's posix_spawn_file_actions_addchdir_np is not visible to Swift: a shell changes
        // the directory, then becomes the program.
        let program = directory == nil ? executable : "/bin/sh"
        let words = directory.map { ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", $0, executable] + arguments }
            ?? [executable] + arguments
        let argv = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { env.forEach { free($0) } }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, program, &actions, &attributes, argv, env)
        guard code == 0 else { throw SpawnError("cannot start \(executable): \(String(cString: strerror(code)))") }
        return Child(pid: pid)
    }

    /// Waits for `child` to end, at most `timeout` seconds; then kills it with SIGKILL.
    ///
    /// - Returns: the exit status, or 128 + the signal that ended it, and whether it timed out.
    @discardableResult
    public static func wait(_ child: Child, timeout: TimeInterval = .infinity) -> (status: Int32, timedOut: Bool) {
        let deadline = Date().addingTimeInterval(timeout)
        var timedOut = false
        var status: Int32 = 0
        var delay: useconds_t = 1000
        while true {
            let result = waitpid(child.pid, &status, WNOHANG)
            if result == child.pid { break }
            if result < 0 && errno != EINTR { return (-1, timedOut) }
            if !timedOut && Date() >= deadline {
                timedOut = true
                kill(child.pid, SIGKILL)
            }
            usleep(delay)
            delay = min(delay * 2, 20_000)
        }
        return (decode(status), timedOut)
    }

    /// Whether `child` is still running (reaps it when it has ended).
    public static func isRunning(_ child: Child) -> Bool {
        var status: Int32 = 0
        return waitpid(child.pid, &status, WNOHANG) == 0
    }

    /// Sends SIGTERM, waits up to `grace` seconds, then SIGKILL and reaps.
    public static func stop(_ child: Child, grace: TimeInterval = 5) {
        kill(child.pid, SIGTERM)
        wait(child, timeout: grace)
    }

    /// Runs a program to its end.
    ///
    /// - Returns: its status (128 + signal when a signal ended it) and whether it timed out.
    @discardableResult
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        directory: String? = nil, stdin: String? = nil, stdout: String? = nil, stderr: String? = nil,
        timeout: TimeInterval = .infinity
    ) throws -> (status: Int32, timedOut: Bool) {
        let child = try start(
            executable, arguments, environment: environment, directory: directory, stdin: stdin, stdout: stdout,
            stderr: stderr)
        return wait(child, timeout: timeout)
    }

    private static func decode(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        if signal == 0 { return (status >> 8) & 0xff }
        return 128 + signal
    }
}

/// A child process that could not start.
public struct SpawnError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
