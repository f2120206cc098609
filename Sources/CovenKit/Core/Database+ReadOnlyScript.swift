import CSQLite
import Foundation

// MARK: - Read-only scripts

extension Database {
    /// Runs every statement of `sql` as ``executeScript(_:parameters:row:)`` does, refusing at
    /// prepare, before it runs, any statement that is not a read.
    ///
    /// A connection opened read-only already fails a write when it runs, but some statements
    /// act before that: `VACUUM INTO 'FILE'` creates FILE and only then fails, and
    /// `PRAGMA journal_mode = DELETE` fails with a bare "disk I/O error". So each statement is
    /// judged once prepared: SQLite's `sqlite3_stmt_readonly` for statements, and for a pragma
    /// (which SQLite's answer does not cover well: reading `journal_mode` counts as a write,
    /// setting `cache_size` as a read) the rule that a pragma given a value changes a setting,
    /// unless the value only says what to read (`table_info(albums)`), and that a few
    /// pragmas act even without one (`wal_checkpoint`, `optimize`, `incremental_vacuum`).
    /// Installs its own authorizer for the run and removes it afterwards.
    ///
    /// Related SQLite documentation: <https://sqlite.org/c3ref/stmt_readonly.html>
    ///
    /// - Throws: `.sql` "coven sql only reads" with what the statement would do as the cause,
    ///   before anything of that statement ran; otherwise what ``executeScript(_:parameters:row:)``
    ///   throws.
    public func executeReadOnlyScript(_ sql: String, parameters: [String: SQLValue], row: (Row) throws -> Void) throws {
        let seen = PragmaSeen()
        setAuthorizer { action, first, second in
            guard action == SQLITE_PRAGMA else { return true }
            let name = first?.lowercased() ?? ""
            seen.record(name: name, value: second)
            return Database.pragmaReads(name: name, value: second)
        }
        defer { setAuthorizer(nil) }
        do {
            try runScript(sql, parameters: parameters, vet: { statement in
                if seen.take() != nil { return } // a pragma the authorizer let through reads
                guard sqlite3_stmt_readonly(statement) == 0 else { return }
                let text = Database.oneLine(String(cString: sqlite3_sql(statement)))
                let changesRows = ["INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"].contains { text.uppercased().hasPrefix($0) }
                throw CovenError(.sql, "coven sql only reads", hint: changesRows ? "change rows with 'coven write'" : nil,
                                 cause: "the statement writes: " + text)
            }, row: row)
        } catch let error as CovenError where error.sqlitePrimaryCode == SQLITE_AUTH {
            guard let pragma = seen.take() else { throw error }
            let what = pragma.value.map { "PRAGMA \(pragma.name) = \($0) changes a setting" } ?? "PRAGMA \(pragma.name) acts on the database"
            throw CovenError(.sql, "coven sql only reads", cause: what)
        }
    }

    /// Whether a pragma only reads: given no value, unless it acts (a checkpoint, an
    /// optimization, a vacuum); given a value, when the value only says what to read.
    static func pragmaReads(name: String, value: String?) -> Bool {
        if ["wal_checkpoint", "optimize", "incremental_vacuum"].contains(name) { return false }
        guard value != nil else { return true }
        return readingPragmas.contains(name)
    }

    /// Pragmas whose argument only says what to read.
    static let readingPragmas: Set<String> = [
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
    ]

    /// A statement's text on one line, cut after 60 characters.
    static func oneLine(_ statement: String) -> String {
        let words = statement.split(whereSeparator: { $0.isWhitespace }).joined(separator: " ")
        let line = words.hasSuffix(";") ? String(words.dropLast()) : words
        return line.count > 60 ? line.prefix(60) + "…" : line
    }
}

/// The last pragma the authorizer saw while a statement was prepared (one connection, one
/// thread: the lock only satisfies the authorizer's `Sendable`).
private final class PragmaSeen: @unchecked Sendable {
    private let lock = NSLock()
    private var last: (name: String, value: String?)?

    func record(name: String, value: String?) {
        lock.lock(); defer { lock.unlock() }
        last = (name, value)
    }

    func take() -> (name: String, value: String?)? {
        lock.lock(); defer { lock.unlock() }
        defer { last = nil }
        return last
    }
}
