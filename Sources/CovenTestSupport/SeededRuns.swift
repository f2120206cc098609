import Foundation

/// The loop of a randomized, seeded test: every run in a fresh folder, the first failure ending
/// the loop with the seed to replay it.
///
/// `COVEN_SEED=N` runs that one seed; `COVEN_RUNS=N` sets how many runs (seeds `base`,
/// `base + 1`, …).
public enum SeededRuns {
    /// Runs `body(seed, folder)` once per seed, in a folder under /dev/shm (or the temporary
    /// folder) removed afterwards. `body` returns a description of what went wrong, or nil.
    ///
    /// - Returns: the first failure, naming its seed and how to replay it; nil when every run
    ///   passed.
    public static func run(_ name: String, runs: Int, base: UInt64, _ body: (UInt64, String) throws -> String?) -> String? {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64]
        if let one = environment["COVEN_SEED"].flatMap(UInt64.init) {
            seeds = [one]
        } else {
            let count = environment["COVEN_RUNS"].flatMap(Int.init) ?? runs
            seeds = (0..<UInt64(count)).map { base + $0 }
        }
        let root = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        for seed in seeds {
            let work = root + "/coven-\(name)-\(seed)-\(UUID().uuidString.prefix(6))"
            defer { try? FileManager.default.removeItem(atPath: work) }
            do {
                if let failure = try body(seed, work) { return "seed \(seed) (replay with COVEN_SEED=\(seed)): \(failure)" }
            } catch {
                return "seed \(seed) (replay with COVEN_SEED=\(seed)) threw: \(error)"
            }
        }
        return nil
    }
}
