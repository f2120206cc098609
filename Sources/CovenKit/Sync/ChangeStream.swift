import Foundation

/// One device's changes in storage after the seq applied here, in order, one at a time: what a
/// pull reads (``StoreSync/pull(provider:keys:stop:learned:progress:)`` applies what it gives).
/// It lists, reads and opens; it applies nothing and records nothing but the changes of a
/// device gone for good that nobody can publish again.
///
/// The failure it prevents: a device that applies a change before one its writer applied
/// first, or past one storage is missing, holds rows the others never will. So a stream gives
/// the next seq only, and says why when it cannot: storage holds nothing there (which may be a
/// gap: the pull judges it against what other devices say they applied), holds later changes
/// but not this one (a gap), holds one this device holds no key of, or one that fails its
/// checks twice (damage, reported to its publisher, who publishes it again).
///
/// Where it does not apply: of a device gone for good, only the changes some device says it
/// applied are read (`through`), and one of those storage lost or damaged is gone past, named
/// as lost for good: nobody can publish it again.
///
/// ```swift
/// var stream = ChangeStream(device: other, after: applied, through: .max, gone: false, reader: reader)
/// while case .change(let change, let path, let seq) = try stream.next(lost: { _, _ in }) {
///     // apply it; then
///     stream.advance()
/// }
/// ```
struct ChangeStream {
    /// What the stream gives next.
    enum Next {
        /// The change of `seq`, opened and checked.
        case change(ChangeObject, path: String, seq: Int64)
        /// Every change up to `through` was given (a device gone for good).
        case end
        /// Storage holds no change at `seq` nor after it: the stream may be at its end, or
        /// past a gap the pull finds from what others applied.
        case missing(seq: Int64)
        /// Storage holds a later change but not `seq`.
        case gap(seq: Int64)
        /// Change `seq` is sealed under a key this device does not hold.
        case keyUnavailable(seq: Int64)
        /// Change `seq` failed its checks twice.
        case damaged(seq: Int64, path: String, error: CovenError)
    }

    /// How a stream reads storage: what one pull shares between its streams.
    struct Reader {
        let provider: StorageProvider
        let keys: Keyring
        let storeID: String
        let stop: Stop
    }

    let device: String
    /// The next seq to give.
    private(set) var seq: Int64
    /// The last seq to give (of a device gone for good, the highest some device applied).
    let through: Int64
    let gone: Bool
    let reader: Reader
    /// The seqs the last listing found after `seq`, and whether it was a full page.
    private var listed: (seqs: [Int64], full: Bool)?

    init(device: String, after applied: Int64, through: Int64, gone: Bool, reader: Reader) {
        self.device = device
        seq = applied + 1
        self.through = through
        self.gone = gone
        self.reader = reader
    }

    /// The next change, or why there is none now. `lost` is told of each change of a device
    /// gone for good that storage lost or damaged, before the stream goes past it.
    mutating func next(lost: (Int64, LostChange.Why) throws -> Void) throws -> Next {
        while seq <= through {
            try reader.stop.check("the sync")
            // One listing of what storage holds after the applied seq, in place of a GET of
            // the next: a change absent below one that storage holds is a gap.
            if listed == nil || (listed!.seqs.isEmpty && listed!.full) { listed = try list(after: seq - 1) }
            guard listed!.seqs.first == seq else {
                // Of a device gone for good, a change some device applied that storage no
                // longer holds is gone past; of another, storage holding a later change but not
                // this one is a gap, and holding none may be one.
                if gone {
                    try lost(seq, .missing)
                    seq += 1
                    continue
                }
                return listed!.seqs.isEmpty ? .missing(seq: seq) : .gap(seq: seq)
            }
            listed!.seqs.removeFirst()
            let path = ChangeObject.path(device: device, seq: UInt64(seq))
            switch try Self.read(path, publisher: device, reader: reader) {
            case .missing:
                return .missing(seq: seq)
            case .keyUnavailable:
                return .keyUnavailable(seq: seq)
            case .damaged(let error):
                if gone {
                    try lost(seq, .damaged)
                    seq += 1
                    continue
                }
                return .damaged(seq: seq, path: path, error: error)
            case .opened(let change):
                return .change(change, path: path, seq: seq)
            }
        }
        return .end
    }

    /// Moves past the change ``next(lost:)`` gave, once it is applied.
    mutating func advance() {
        seq += 1
    }

    /// The seqs of the device's changes that storage holds after `seq`, a page at a time.
    private func list(after seq: Int64) throws -> (seqs: [Int64], full: Bool) {
        let page = 1000
        let listed = try reader.provider.list(prefix: "changes/\(device)/", after: ChangeObject.path(device: device, seq: UInt64(max(0, seq))), limit: page)
        let seqs = listed.compactMap { ChangeObject.parsePath($0.key).flatMap { $0.device == device ? Int64($0.seq) : nil } }
        return (seqs, listed.count >= page)
    }

    /// What reading a change gave: nothing there, bytes that fail their checks (read twice, so
    /// a bad transfer is not taken for damage), or the change.
    enum Read {
        case missing
        case keyUnavailable
        case damaged(CovenError)
        case opened(ChangeObject)
    }

    /// Reads and opens the change at `path` of `publisher`.
    static func read(_ path: String, publisher: String, reader: Reader) throws -> Read {
        // A publisher without a usable key stops the pull: that is not damage to report.
        _ = try reader.keys.publicKey(of: publisher)
        var failure: CovenError?
        for _ in 0..<2 {
            guard let sealed = try reader.provider.getObject(path) else { return .missing }
            do {
                return .opened(try reader.keys.open(change: sealed, path: path, publisher: publisher, storeID: reader.storeID))
            } catch let error as CovenError where error.code == .keyUnavailable {
                return .keyUnavailable
            } catch var error as CovenError where error.code == .integrity || error.code == .decoding {
                // Sync's errors name the object they are about.
                error.details["object"] = path
                if !error.message.contains(path) { error.message = "change '\(path)': " + error.message }
                failure = error
            }
        }
        return .damaged(failure ?? CovenError(.integrity, "change '\(path)' fails its checks", details: ["object": path]))
    }
}
