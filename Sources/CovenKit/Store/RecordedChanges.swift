import Foundation

/// One change of one row by a recorded write, its firings folded together: an insert then an
/// update is an insert, an insert then a delete is nothing.
struct RecordedChange {
    /// What the write did to the row: it did not exist before, or exists no more after.
    enum Operation { case insert, update, delete }
    var table: String
    var id: String
    var operation: Operation
    /// The file columns' values before the write (updates and deletes), and an owner-only
    /// table's owner column's, when read (``RecordedChanges/forEachBatch(size:oldFiles:_:)``).
    var oldFiles: [String: SQLValue]
    /// Where the write first touched the row, in its order (the capture's position).
    var pos: Int64 = 0
}

/// The rows a recorded write had changed when ``RecordedWrite/changes()`` was called, one change
/// per row, read in batches so that no write is held in memory whatever its size.
///
/// The changes are read from a temporary table of the connection (``RowCapture/fold()``), as
/// they were at the call, until the next call of ``RecordedWrite/changes()`` or the write's
/// commit, which fold what the write did since: read them before.
struct RecordedChanges {
    /// The changes read at a time.
    static let batchSize = 500

    let capture: RowCapture
    let fileColumns: [String: [String]]
    /// The fold of the capture read (``RowCapture/generation``).
    let generation: Int

    /// Calls `body` with the changes in batches of at most `size`, in the order the write first
    /// touched the rows. `body` may change the database; the batches still read the changes as
    /// they were when folded.
    ///
    /// - Parameter oldFiles: whether the changes carry their rows' old file columns
    ///   (``RecordedChange/oldFiles``); without, they are empty and reading is cheaper.
    func forEachBatch(size: Int = RecordedChanges.batchSize, oldFiles: Bool, _ body: ([RecordedChange]) throws -> Void) throws {
        var pos: Int64 = -1
        while true {
            precondition(capture.generation == generation, "internal error: a write's changes are read after they were folded anew")
            let page = try capture.foldedChanges(after: pos, limit: size, fileColumns: oldFiles ? fileColumns : nil)
            guard let last = page.last else { return }
            pos = last.pos
            try body(page.map(\.change))
            if page.count < size { return }
        }
    }

    /// Whether the write deleted a row it did not insert.
    func hasDeletes() throws -> Bool {
        precondition(capture.generation == generation, "internal error: a write's changes are read after they were folded anew")
        return try capture.hasDeletes()
    }

    /// `ids` as a JSON array, for `json_each`: a batch's ids in one parameter, made without
    /// Foundation's serializer, which costs more than the query.
    static func json(ids: [String]) -> String {
        var json = "["
        json.reserveCapacity(ids.reduce(2) { $0 + $1.utf8.count + 3 })
        for (index, id) in ids.enumerated() {
            if index > 0 { json += "," }
            appendString(id, to: &json)
        }
        return json + "]"
    }

    /// A number for each id as a JSON object, for `json_each`, whose `key` is then the id and
    /// `value` its number: a statement joins it to a table by the id alone. (Two arrays joined
    /// by their index scan the second for each row of the first: 4 ms a batch of 256.) Each id
    /// is given once.
    static func json(numbers: [(id: String, number: Int64)]) -> String {
        var json = "{"
        json.reserveCapacity(numbers.reduce(2) { $0 + $1.id.utf8.count + 24 })
        for (index, pair) in numbers.enumerated() {
            if index > 0 { json += "," }
            appendString(pair.id, to: &json)
            json += ":" + String(pair.number)
        }
        return json + "}"
    }

    /// Appends `text` to `json` as a JSON string.
    private static func appendString(_ text: String, to json: inout String) {
        json += "\""
        // A byte that needs escaping: read from the text's own bytes where it has them (the
        // ids of a batch of 10,000 files are all plain, and the generic scan cost more).
        let needsEscape: (UInt8) -> Bool = { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }
        let escaped = text.utf8.withContiguousStorageIfAvailable { $0.contains(where: needsEscape) }
            ?? text.utf8.contains(where: needsEscape)
        guard escaped else {
            json += text
            json += "\""
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": json += "\\\""
            case "\\": json += "\\\\"
            case _ where scalar.value < 0x20: json += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: json.unicodeScalars.append(scalar)
            }
        }
        json += "\""
    }
}
