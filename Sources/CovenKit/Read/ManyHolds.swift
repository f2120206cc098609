import Foundation

/// One file of a `coven get` of many: its id as given and the held copy, or why it failed.
public struct HoldOutcome: Sendable {
    public var file: String
    public var result: Result<(path: String, report: ReadReport), CovenError>
}

/// What a `coven get` of many did.
public struct HoldSummary: Sendable, Equatable {
    public var held = 0
    public var failed = 0
}

/// `coven get FILE...` and `coven get --files-from`: makes sure each file of a list is held
/// whole on this device (``Device/holdFile(_:stop:)``), several at once, reporting them in the
/// order of the list. The ids are read a window at a time, so memory stays bounded whatever the
/// count; a file that fails is reported as failed and the others go on.
public struct ManyHolds {
    let device: Device

    /// Files taken at a time; their outcomes are reported once the window is done.
    public static let window = 64
    /// Files fetched at once, each on a connection of its own (fetch-kept's count).
    public static let atOnce = 8

    public init(device: Device) {
        self.device = device
    }

    /// Holds every file `next` gives (nil ends the list), `parallel` at once, and calls
    /// `report` with each outcome in the order of the list.
    ///
    /// - Throws: `.interrupted` when `stop` is asked (the files held before stay held, their
    ///   outcomes reported); an error of `next` or `report`.
    public func hold(stop: Stop = Stop(), parallel: Int = ManyHolds.atOnce, next: () throws -> String?,
                     report: (HoldOutcome) throws -> Void) throws -> HoldSummary {
        var summary = HoldSummary()
        let pool = HoldPool(device: device, workers: max(1, parallel))
        defer { pool.close() }
        var ended = false
        while !ended {
            var ids: [String] = []
            while ids.count < Self.window {
                guard let id = try next() else {
                    ended = true
                    break
                }
                ids.append(id)
            }
            guard !ids.isEmpty else { break }
            try stop.check("get")
            for outcome in pool.hold(ids, stop: stop) {
                if case .failure(let error) = outcome.result, error.code == .interrupted { throw error }
                switch outcome.result {
                case .success: summary.held += 1
                case .failure: summary.failed += 1
                }
                try report(outcome)
            }
        }
        return summary
    }
}

/// The connections a `get` of many fetches on: the caller's device for the first, one opened
/// per further worker (a fetch waits on storage and on its syncs, not on the CPU).
/// @unchecked: the devices are each used by one thread at a time, handed out under `lock`.
private final class HoldPool: @unchecked Sendable {
    private let device: Device
    private let workers: Int
    private let lock = NSLock()
    private var spare: [Device] = []
    private var opened = 0

    init(device: Device, workers: Int) {
        self.device = device
        self.workers = workers
    }

    /// A connection for one worker: the caller's device first, then ones opened on demand.
    private func take() throws -> Device {
        lock.lock()
        defer { lock.unlock() }
        if let device = spare.popLast() { return device }
        if opened == 0 {
            opened += 1
            return device
        }
        opened += 1
        let worker = try Device.open(paths: device.paths)
        worker.storageEnvironment = device.storageEnvironment
        return worker
    }

    private func give(_ worker: Device) {
        lock.lock()
        spare.append(worker)
        lock.unlock()
    }

    func close() {
        lock.lock()
        spare.removeAll()
        lock.unlock()
    }

    /// The outcomes of `ids`, in their order; an id given twice is held once.
    func hold(_ ids: [String], stop: Stop) -> [HoldOutcome] {
        var seen: Set<String> = []
        let unique = ids.filter { seen.insert($0).inserted }
        let results = Results(count: unique.count)
        let count = min(workers, unique.count)
        let next = Counter()
        let work: @Sendable () -> Void = { [self] in
            var worker: Device?
            defer { if let worker { give(worker) } }
            while let index = next.take(below: unique.count) {
                let id = unique[index]
                do {
                    if worker == nil { worker = try take() }
                    try stop.check("get")
                    let held = try worker!.holdFile(id, stop: stop)
                    results.set(index, .success(held))
                } catch {
                    results.set(index, .failure(error.asCovenError))
                }
            }
        }
        if count <= 1 {
            work()
        } else {
            // A thread each, as fetch-kept: concurrentPerform runs no more at once than the
            // pool has threads, and a fetch waits on storage.
            let finished = DispatchGroup()
            for _ in 0..<count {
                finished.enter()
                Thread.detachNewThread {
                    work()
                    finished.leave()
                }
            }
            finished.wait()
        }
        let byID = Dictionary(uniqueKeysWithValues: zip(unique, results.all))
        return ids.map { HoldOutcome(file: $0, result: byID[$0]!) }
    }

    /// The results of one window, set by the workers. @unchecked: used under `lock`.
    private final class Results: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Result<(path: String, report: ReadReport), CovenError>?]

        init(count: Int) { values = Array(repeating: nil, count: count) }

        func set(_ index: Int, _ value: Result<(path: String, report: ReadReport), CovenError>) {
            lock.lock()
            values[index] = value
            lock.unlock()
        }

        var all: [Result<(path: String, report: ReadReport), CovenError>] {
            lock.lock()
            defer { lock.unlock() }
            return values.map { $0 ?? .failure(CovenError(.internal, "a file of the list was not held")) }
        }
    }

    /// The next index to hold. @unchecked: used under `lock`.
    private final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var value = 0

        func take(below limit: Int) -> Int? {
            lock.lock()
            defer { lock.unlock() }
            guard value < limit else { return nil }
            defer { value += 1 }
            return value
        }
    }
}
