import Foundation

/// A gc pass's deletes: in batches, several at once, each confirmed one recorded.
extension Collector {
    /// Deletes `keys` (only what may be deleted: files/, changes/, snapshots/), reporting each;
    /// `done` runs for each key the provider confirmed, all of them in one transaction (a
    /// commit per key was a synchronous write per object: 100,000 of them for a library
    /// deleted at once), and each is reported once that transaction is committed. Killed
    /// before it commits, the deletes storage confirmed are not recorded: the next pass finds
    /// those objects gone and settles them as such.
    func delete(_ keys: [String], kind: GCReport.Kind, into report: inout GCReport, done: (String) throws -> Void) throws {
        let keys = keys.filter { $0.hasPrefix("files/") || $0.hasPrefix("changes/") || $0.hasPrefix("snapshots/") }
        guard !keys.isEmpty else { return }
        if dryRun {
            report.deleted += keys.map { .init(key: $0, kind: kind) }
            return
        }
        let (failed, absent) = try deleteInParallel(keys)
        try database.transaction {
            for key in keys where failed[key] == nil { try done(key) }
        }
        for key in keys {
            if let error = failed[key] {
                let reason: GCReport.KeepReason = error.storageFailure == .denied ? .refused : .failed
                report.kept.append(.init(key: key, kind: kind, reason: reason, detail: error.message + (error.cause.map { ": \($0)" } ?? "")))
                continue
            }
            let deleted = GCReport.Deleted(key: key, kind: kind)
            let gone = absent.contains(key)
            if gone { report.alreadyGone.append(deleted) } else { report.deleted.append(deleted) }
            confirmed?(deleted, gone)
        }
    }

    /// How many objects' candidates one page of ``collectFiles(into:)`` reads (their deletes go
    /// before the next page is read).
    static let candidatePage = parallelDeletes * deleteBatch

    /// How many batches of deletes go at once, each over its own connection.
    static let parallelDeletes = 4
    /// The keys one batch holds (S3 DeleteObjects takes up to 1,000).
    static let deleteBatch = 1000

    /// Deletes `keys` in batches, up to ``parallelDeletes`` at once; the keys not deleted, with
    /// why. A batch whose request fails as a whole counts every key of it as not deleted.
    private func deleteInParallel(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>) {
        let batches = stride(from: 0, to: keys.count, by: Self.deleteBatch).map { Array(keys[$0..<min(keys.count, $0 + Self.deleteBatch)]) }
        guard batches.count > 1 else { return Self.run(keys, on: provider) }
        let connector = StorageConnector(location: device.storage, environment: device.storageEnvironment)
        let results = DeleteResults(count: batches.count)
        let next = DeleteResults.Counter()
        DispatchQueue.concurrentPerform(iterations: min(Self.parallelDeletes, batches.count)) { _ in
            guard let connection = try? connector.connect() else { return }
            while let index = next.take(below: batches.count) {
                results.set(index, Self.run(batches[index], on: connection))
            }
        }
        var failed: [String: CovenError] = [:]
        var absent: Set<String> = []
        for (index, batch) in batches.enumerated() {
            guard let result = results.get(index) else {
                // No connection could be made for it: nothing of it was sent.
                let error = CovenError.storage("storage could not be reached to delete \(batch.count) objects", failure: .network, cause: "no connection")
                for key in batch { failed[key] = error }
                continue
            }
            failed.merge(result.failed) { first, _ in first }
            absent.formUnion(result.absent)
        }
        return (failed, absent)
    }

    /// One batch's delete; every key of it not deleted when the request fails as a whole.
    private static func run(_ batch: [String], on provider: StorageProvider) -> (failed: [String: CovenError], absent: Set<String>) {
        do {
            return try provider.deleteObjectsNotingAbsent(batch)
        } catch let error as CovenError {
            return (Dictionary(uniqueKeysWithValues: batch.map { ($0, error) }), [])
        } catch {
            let failure = CovenError.storage("storage failed to delete \(batch.count) objects", failure: .provider, cause: String(describing: error))
            return (Dictionary(uniqueKeysWithValues: batch.map { ($0, failure) }), [])
        }
    }
}

/// The answers of parallel delete batches, behind one lock.
final class DeleteResults: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var results: [(failed: [String: CovenError], absent: Set<String>)?]

    init(count: Int) { results = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ result: (failed: [String: CovenError], absent: Set<String>)) {
        lock.lock()
        defer { lock.unlock() }
        results[index] = result
    }

    func get(_ index: Int) -> (failed: [String: CovenError], absent: Set<String>)? {
        lock.lock()
        defer { lock.unlock() }
        return results[index]
    }

    /// Hands out batch indexes, each once.
    final class Counter: @unchecked Sendable {
        // @unchecked: every access goes through `lock`.
        private let lock = NSLock()
        private var next = 0

        func take(below count: Int) -> Int? {
            lock.lock()
            defer { lock.unlock() }
            guard next < count else { return nil }
            next += 1
            return next - 1
        }
    }
}
