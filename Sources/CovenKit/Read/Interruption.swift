import Foundation

/// Ctrl-C for long jobs (`coven fetch-kept`): SIGINT sets a flag that the job polls between
/// runs of chunks, so it stops cleanly and keeps what it fetched.
///
/// The flag is the one piece of process-wide mutable state here, as a signal handler needs; it
/// is only ever set by the handler and read by the job.
public enum Interruption {
    nonisolated(unsafe) private static var flag: sig_atomic_t = 0

    /// Installs the SIGINT handler.
    public static func install() {
        signal(SIGINT) { _ in Interruption.flag = 1 }
    }

    /// Whether SIGINT arrived since ``install()``.
    public static var requested: Bool { flag != 0 }
}
