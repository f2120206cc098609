import CSQLite
import Foundation

extension Migrations {
    /// A migration changes the app's tables only, with the same rule as a write
    /// (``WriteSession/appPolicy(_:)``) but for schema changes, which are its job: it may create,
    /// alter and drop the app's tables, indexes, triggers and views and change their rows; it
    /// may not touch coven's tables (`coven_*`) or SQLite's own, set a pragma, control the
    /// transaction or attach a database.
    ///
    /// SQLite reports a schema change also as a write of `sqlite_master` (or `sqlite_temp_master`),
    /// which is allowed: the change itself was judged by its own action.
    static let policy: AuthorizerPolicy = { action, first, second in
        func isCoven(_ name: String?) -> Bool {
            guard let name = name?.lowercased() else { return false }
            return name.hasPrefix("coven_") || (name.hasPrefix("sqlite_") && !schemaTables.contains(name))
        }
        switch action {
        case SQLITE_INSERT, SQLITE_UPDATE, SQLITE_DELETE:
            return !isCoven(first)
        case SQLITE_CREATE_TABLE, SQLITE_DROP_TABLE, SQLITE_CREATE_VIEW, SQLITE_DROP_VIEW,
             SQLITE_CREATE_TEMP_TABLE, SQLITE_DROP_TEMP_TABLE, SQLITE_CREATE_TEMP_VIEW, SQLITE_DROP_TEMP_VIEW:
            // (name, nil); SQLite refuses names starting with sqlite_ itself.
            return !isCoven(first)
        case SQLITE_CREATE_INDEX, SQLITE_DROP_INDEX, SQLITE_CREATE_TRIGGER, SQLITE_DROP_TRIGGER,
             SQLITE_CREATE_TEMP_INDEX, SQLITE_DROP_TEMP_INDEX, SQLITE_CREATE_TEMP_TRIGGER, SQLITE_DROP_TEMP_TRIGGER:
            // (index or trigger name, table name); a table's own key index is sqlite_autoindex_….
            return !(first?.lowercased().hasPrefix("coven_") ?? false) && !isCoven(second)
        case SQLITE_ALTER_TABLE:
            // (database name, table name)
            return !isCoven(second)
        case SQLITE_CREATE_VTABLE, SQLITE_DROP_VTABLE, SQLITE_TRANSACTION, SQLITE_SAVEPOINT, SQLITE_ATTACH, SQLITE_DETACH:
            return false
        case SQLITE_PRAGMA:
            guard second != nil else { return true }
            return Database.readingPragmas.contains(first?.lowercased() ?? "")
        default:
            return true
        }
    }

    /// The schema tables SQLite itself writes for a schema change.
    static let schemaTables: Set<String> = ["sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema", "sqlite_sequence"]

    /// Runs one migration under ``policy``.
    ///
    /// - Throws: `.migration` naming what the migration may not do, or its SQL error.
    static func run(_ sql: String, position: Int, on database: Database) throws {
        database.setAuthorizer(policy)
        defer { database.setAuthorizer(nil) }
        do {
            try database.execute(sql)
        } catch let error as CovenError {
            if error.message == "not authorized" || (error.cause ?? "").contains("not authorized") {
                throw CovenError(.migration, "migrations[\(position)] changes more than the app's tables",
                                 hint: "a migration may change the app's tables, not coven's tables, pragmas or the transaction",
                                 cause: error.message, details: ["position": String(position)])
            }
            throw CovenError(.migration, "migrations[\(position)] failed", cause: error.message, details: ["position": String(position)])
        }
    }
}
