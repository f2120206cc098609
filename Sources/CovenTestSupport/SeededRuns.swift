import CovenKit
import Foundation

/// The loop of a randomized, seeded test: every run in a fresh folder, the first failure ending
/// the loop with the seed to replay it.
///
/// `COVEN_SEED=N` runs that one seed; `COVEN_RUNS=N` sets how many runs (seeds `base`,
/// `base + 1`, …), and `COVEN_SEED_SKIP=K` skips the first K of them (a sweep past a known
/// failure).
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
            let skip = environment["COVEN_SEED_SKIP"].flatMap(UInt64.init) ?? 0
            seeds = (skip..<max(skip, UInt64(count))).map { base + $0 }
        }
        let root = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        // Runs share nothing (each its own folder, store and devices), so they run on every
        // core at once (`COVEN_MODEL_WORKERS=N` sets how many): the same seeds and checks in
        // less time. The failure reported is that of the lowest failing seed run.
        let workers = max(1, min(seeds.count, environment["COVEN_MODEL_WORKERS"].flatMap(Int.init) ?? ProcessInfo.processInfo.activeProcessorCount))
        let state = RunState()
        withoutActuallyEscaping(body) { body in
            let shared = UncheckedBox(body)
            DispatchQueue.concurrentPerform(iterations: workers) { _ in
                while let index = state.take(below: seeds.count) {
                    let seed = seeds[index]
                    let work = root + "/coven-\(name)-\(seed)-\(UUID().uuidString.prefix(6))"
                    defer { try? FileManager.default.removeItem(atPath: work) }
                    do {
                        if let failure = try shared.value(seed, work) { state.fail(index, "seed \(seed) (replay with COVEN_SEED=\(seed)): \(failure)") }
                    } catch {
                        state.fail(index, "seed \(seed) (replay with COVEN_SEED=\(seed)) threw: \(error)")
                    }
                }
            }
        }
        return state.failure
    }

    /// The next run to make, and the first failure, shared by the workers.
    private final class RunState: @unchecked Sendable {
        private let lock = NSLock()
        private var next = 0
        private var failed: (index: Int, text: String)?

        /// The index of the next run, or nil when all were taken or a run failed.
        func take(below count: Int) -> Int? {
            lock.lock()
            defer { lock.unlock() }
            guard failed == nil, next < count else { return nil }
            next += 1
            return next - 1
        }

        func fail(_ index: Int, _ text: String) {
            lock.lock()
            defer { lock.unlock() }
            if failed.map({ index < $0.index }) ?? true { failed = (index, text) }
        }

        var failure: String? {
            lock.lock()
            defer { lock.unlock() }
            return failed?.text
        }
    }

    /// A run's body, handed to the workers: each call is one run with its own folder and state.
    private struct UncheckedBox<T>: @unchecked Sendable {
        let value: T
        init(_ value: T) { self.value = value }
    }
}

extension SeededRuns {
    /// A store of `kind` on file:// in `work` and `count` devices of it, named d0, d1, … (d0 made
    /// it; in a store of members, all of them the owner's), for one run of a model test.
    public static func devices(_ count: Int, in work: String, manifest json: String, kind: TestStoreKind = .members) throws -> [Device] {
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let first = try TestStores.create(paths: DevicePaths(database: work + "/d0/device.db"), storage: .file(directory: work + "/store"),
                                          manifest: try Manifest(json: Data(json.utf8)), name: "d0", kind: kind)
        var devices = [first]
        for index in 1..<count {
            devices.append(try TestStores.join(paths: DevicePaths(database: work + "/d\(index)/device.db"), from: first, name: "d\(index)"))
        }
        return devices
    }
}
