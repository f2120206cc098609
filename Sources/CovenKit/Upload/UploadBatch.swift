import Dispatch
import Foundation

// MARK: - A batch of small objects in flight (UploadWorker's jobs)

/// One whole object of a batch, prepared on the job's thread for a lane.
struct BatchItem: @unchecked Sendable {
    let index: Int
    let object: String
    let resumed: Bool
    let whole: UploadSender.WholeObject
    var total: Int64 { whole.total }
}

/// The items of a batch, handed to the senders in order, within a budget of sealed bytes held
/// at once. @unchecked: under `condition`.
final class BatchWork: @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [BatchItem]
    private var position = 0
    private let budget: Int64
    private var inFlight: Int64 = 0
    init(_ items: [BatchItem], budget: Int64) {
        self.items = items
        self.budget = budget
    }
    var count: Int { items.count }

    /// The next item, once the budget has room for it (or nothing else is in flight).
    func next() -> BatchItem? {
        condition.lock()
        defer { condition.unlock() }
        guard position < items.count else { return nil }
        while position < items.count && inFlight > 0 && inFlight + items[position].total > budget { condition.wait() }
        guard position < items.count else { return nil }
        let item = items[position]
        position += 1
        inFlight += item.total
        return item
    }

    /// An item's sender is done with it.
    func done(_ item: BatchItem) {
        condition.lock()
        inFlight -= item.total
        condition.broadcast()
        condition.unlock()
    }
}

/// A batch whose senders were started: its claims, how each attempt ended, and the senders'
/// group.
final class RunningBatch {
    let claims: [UploadClaim]
    let ends: BatchEnds
    let group = DispatchGroup()
    init(claims: [UploadClaim]) {
        self.claims = claims
        ends = BatchEnds(count: claims.count)
    }

    /// Waits until every sender of the batch is done.
    func waitSent() { group.wait() }
}

/// How each attempt of a batch ended, written by the lanes. @unchecked: under `lock`.
final class BatchEnds: @unchecked Sendable {
    private let lock = NSLock()
    private var ends: [AttemptEnd]
    init(count: Int) { ends = Array(repeating: .stopped(.interrupted), count: count) }
    subscript(index: Int) -> AttemptEnd {
        get { lock.lock(); defer { lock.unlock() }; return ends[index] }
        set { lock.lock(); ends[index] = newValue; lock.unlock() }
    }
}

/// A lane's provider, used by that lane alone. @unchecked: one thread at a time.
final class ProviderHandle: @unchecked Sendable {
    let provider: any StorageProvider
    init(_ provider: any StorageProvider) { self.provider = provider }
}
