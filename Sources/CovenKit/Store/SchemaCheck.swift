import Foundation

/// The conventions of spec/local-data.md "What a synced table looks like" and of spec/files.md
/// for file columns, checked whenever a device opens or migrates. Each refusal names the table
/// and column.
struct SchemaCheck {
    let database: Database
    let manifest: Manifest

    func run() throws {
        let appTables = try database.query("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'coven\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").compactMap { $0.string("name") }
        // No app table may hold an SQL foreign key into coven_files.
        for table in appTables {
            for key in try database.query("SELECT \"table\" AS target, \"from\" AS column FROM pragma_foreign_key_list(?1)", [table]) {
                if key.string("target")?.lowercased() == "coven_files" {
                    throw CovenError(.schema, "table '\(table)' column '\(key.string("column") ?? "?")' holds a foreign key into coven_files", hint: "declare the column as a file column in the manifest instead", details: ["table": table, "column": key.string("column") ?? ""])
                }
            }
        }
        for table in manifest.tables {
            try check(table, appTables: appTables)
        }
    }

    private func refuse(_ table: String, _ column: String?, _ message: String, hint: String? = nil) -> CovenError {
        var details = ["table": table]
        if let column { details["column"] = column }
        return CovenError(.schema, message, hint: hint, details: details)
    }

    private func check(_ table: Manifest.SyncedTable, appTables: [String]) throws {
        let name = table.name
        guard appTables.contains(name) else {
            throw refuse(name, nil, "synced table '\(name)' does not exist", hint: "create it in a migration")
        }
        let strict = try database.scalar("SELECT strict FROM pragma_table_list WHERE name = ?1 AND schema = 'main'", [name]).intValue ?? 0
        guard strict == 1 else {
            throw refuse(name, nil, "synced table '\(name)' is not STRICT", hint: "declare it with CREATE TABLE … STRICT")
        }
        let columns = try database.query("SELECT cid, name, upper(type) AS type, \"notnull\" AS nn, pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid", [name])
        guard let first = columns.first, first.string("name") == "id", first.string("type") == "TEXT", first.int("pk") == 1 else {
            throw refuse(name, "id", "synced table '\(name)' needs 'id TEXT PRIMARY KEY' as its first column")
        }
        guard columns.filter({ ($0.int("pk") ?? 0) > 0 }).count == 1 else {
            throw refuse(name, "id", "synced table '\(name)' must have 'id' as its only primary key column")
        }
        guard let updated = columns.first(where: { $0.string("name") == "_updated_at" }),
              updated.string("type") == "TEXT", updated.int("nn") == 1 else {
            throw refuse(name, "_updated_at", "synced table '\(name)' needs an '_updated_at TEXT NOT NULL' column")
        }
        func column(_ column: String, _ role: String) throws -> Row {
            guard let row = columns.first(where: { $0.string("name") == column }) else {
                throw refuse(name, column, "\(role) column '\(column)' of table '\(name)' does not exist")
            }
            return row
        }
        let keys = try database.query("SELECT \"table\" AS target, \"from\" AS column FROM pragma_foreign_key_list(?1)", [name])
        if let audience = table.audienceColumn { _ = try column(audience, "audience") }
        if let from = table.audienceFrom {
            _ = try column(from, "audience_from")
            guard keys.contains(where: { $0.string("column") == from }) else {
                throw refuse(name, from, "audience_from column '\(from)' of table '\(name)' has no foreign key to follow", hint: "declare it REFERENCES the parent table")
            }
        }
        if case .gatedBy(let gate) = table.gate { _ = try column(gate, "gated_by") }
        if let owner = table.ownerColumn {
            let row = try column(owner, "owner")
            guard row.string("type") == "TEXT", (row.int("hidden") ?? 0) == 0 else {
                throw refuse(name, owner, "owner column '\(owner)' of table '\(name)' must be a TEXT column that is not generated")
            }
        }
        for file in table.files {
            let row = try column(file.column, "file")
            let hidden = row.int("hidden") ?? 0
            guard hidden != 2 && hidden != 3 else {
                throw refuse(name, file.column, "file column '\(file.column)' of table '\(name)' is a generated column")
            }
            guard row.string("type") == "TEXT" else {
                throw refuse(name, file.column, "file column '\(file.column)' of table '\(name)' must be declared TEXT")
            }
            guard !keys.contains(where: { $0.string("column") == file.column }) else {
                throw refuse(name, file.column, "file column '\(file.column)' of table '\(name)' is an SQL foreign key")
            }
        }
    }
}
