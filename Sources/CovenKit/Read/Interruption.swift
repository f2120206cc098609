import Foundation

/// Ctrl-C for long jobs (`coven fetch-kept`): SIGINT sets a flag that the job polls between
/// runs of chunks, so it stops cleanly and keeps what it fetched. A request stalled on the
/// network is not interrupted by the first Ctrl-C; a second one ends the process at once
/// (status 130), keeping every file fetched and every chunk recorded so far.
///
/// The flag is the one piece of process-wide mutable state here, as a signal handler needs; it
/// is only ever set by the handler and read by the job.
public enum Interruption {
    nonisolated(unsafe) private static var flag: sig_atomic_t = 0

    /// Installs the SIGINT handler.
    public static func install() {
        signal(SIGINT) { _ in
            if Interruption.flag != 0 { _exit(130) }
            Interruption.flag = 1
        }
    }

    /// Whether SIGINT arrived since ``install()``.
    public static var requested: Bool { flag != 0 }
}
