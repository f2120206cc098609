import Foundation

/// The synced tables' foreign keys, what gate each table is under, and the one **kept**
/// predicate per table that both the push filter and the snapshot cleanup evaluate
/// (spec/local-data.md "One tree, both directions", "The keep rule"; DESIGN.md "Gates").
///
/// Built from the manifest's gate forms and the schema's foreign keys
/// (`pragma_foreign_key_list`, single-column keys into synced tables):
///
/// - a **gated root** (`gated_by: COLUMN`) is kept while its column is true:
///   `a.col IS NOT NULL AND CAST(a.col AS INTEGER) <> 0` (and, for a root under another gated
///   root, while that parent is kept too, so no shared row points at a private one);
/// - a **remote root** (`remote_root: true`) is always kept;
/// - a plain table with a foreign key into a gated root or one of its descendants
///   **inherits** that gate: an `EXISTS` up each such key into the parent's rule (all of them,
///   when it has several);
/// - a plain table with no such key but one into an ancestor inherits the ancestor's rule the
///   same way (a workspace's settings row follows its workspace);
/// - an **ancestor** (`gated_by_descendants: true`) is kept while some kept child exists: an
///   `EXISTS` down each inferred child's key into the child's rule. The inferred children are the
///   synced tables with a key into it, except a child that already inherits the ancestor's own
///   rule (it would keep its parent alive in a circle); a key of the ancestor into itself (a
///   workspace nested in a workspace) is followed down to any depth by a recursive CTE;
/// - every other table (under no gated or remote root) is always kept: it syncs as before.
///
/// `coven_files` is kept unless it is referenced, and only by rows that are not kept: the file's
/// key is in the record.
///
/// A self-reference of a table other than an ancestor (subtasks of a todo) does not take part:
/// each row is judged by its other keys.
struct SchemaGraph {
    /// One single-column foreign key between synced tables.
    struct Edge: Equatable {
        /// The referencing table and its column.
        var child: String
        var column: String
        /// The referenced table and its column (its primary key when the key names none).
        var parent: String
        var parentColumn: String
    }

    /// What gate a table is under.
    enum Role: Equatable {
        /// Under no gated or remote root: always kept.
        case free
        /// A gated root, with the column that gates it.
        case root(column: String)
        /// A remote root: always kept, and its files (and its descendants') stored.
        case remoteRoot
        /// Under a remote root (a descendant through its keys): always kept.
        case underRemoteRoot
        /// An ancestor kept while a kept child exists.
        case ancestor
        /// A descendant of a gated root (through these keys).
        case inherits([Edge])
        /// A descendant of an ancestor, with no gated root above it (through these keys).
        case inheritsAncestor([Edge])
    }

    let manifest: Manifest
    /// Keys of each synced table into other synced tables.
    private(set) var parents: [String: [Edge]] = [:]
    /// Keys into each synced table from other synced tables.
    private(set) var children: [String: [Edge]] = [:]
    /// Keys of a table into itself.
    private(set) var selfEdges: [String: [Edge]] = [:]
    private(set) var roles: [String: Role] = [:]

    /// Reads the foreign keys of the manifest's tables from `database`.
    init(manifest: Manifest, database: Database) throws {
        self.manifest = manifest
        let synced = Set(manifest.tables.map(\.name))
        for table in manifest.tables {
            let rows = try database.query("SELECT id, seq, \"table\" AS parent, \"from\" AS col, \"to\" AS pcol FROM pragma_foreign_key_list(?1)", [table.name])
            let composite = Set(rows.filter { ($0.int("seq") ?? 0) > 0 }.compactMap { $0.int("id") })
            for row in rows where !composite.contains(row.int("id") ?? -1) {
                guard let parent = row.string("parent"), synced.contains(parent), let column = row.string("col") else { continue }
                let edge = Edge(child: table.name, column: column, parent: parent, parentColumn: row.string("pcol") ?? "id")
                if parent == table.name {
                    selfEdges[table.name, default: []].append(edge)
                } else {
                    parents[table.name, default: []].append(edge)
                    children[parent, default: []].append(edge)
                }
            }
        }
        var visiting: Set<String> = []
        for table in manifest.tables { _ = role(table.name, visiting: &visiting) }
    }

    /// Works out (and remembers) the role of `table`; a key cycle is broken where it closes.
    private mutating func role(_ table: String, visiting: inout Set<String>) -> Role {
        if let known = roles[table] { return known }
        guard let declared = manifest.table(table) else { return .free }
        let role: Role
        switch declared.gate {
        case .gatedBy(let column): role = .root(column: column)
        case .remoteRoot: role = .remoteRoot
        case .gatedByDescendants: role = .ancestor
        case .none:
            guard visiting.insert(table).inserted else { return .free }
            defer { visiting.remove(table) }
            var gated: [Edge] = []
            var ancestral: [Edge] = []
            var remote = false
            for edge in parents[table] ?? [] {
                switch self.role(edge.parent, visiting: &visiting) {
                case .root, .inherits: gated.append(edge)
                case .ancestor, .inheritsAncestor: ancestral.append(edge)
                case .remoteRoot, .underRemoteRoot: remote = true
                case .free: break
                }
            }
            if !gated.isEmpty {
                role = .inherits(gated)
            } else if !ancestral.isEmpty {
                role = .inheritsAncestor(ancestral)
            } else {
                role = remote ? .underRemoteRoot : .free
            }
        }
        roles[table] = role
        return role
    }

    /// The role of a synced table (`.free` for any other).
    func roleOf(_ table: String) -> Role { roles[table] ?? .free }

    /// Whether rows of `table` can be kept back: its predicate is not always true. `coven_files`
    /// is gated when a gated table references files.
    func isGated(_ table: String) -> Bool {
        if table == "coven_files" { return !gatedFileTables.isEmpty }
        switch roleOf(table) {
        case .free, .remoteRoot, .underRemoteRoot: return false
        case .root, .ancestor, .inherits, .inheritsAncestor: return true
        }
    }

    /// The tables whose rows can be kept back (`coven_files` last, if it can).
    var gatedTables: [String] {
        manifest.tables.map(\.name).filter(isGated) + (isGated("coven_files") ? ["coven_files"] : [])
    }

    /// The remote root a table is under (itself, or the first found up its keys), if any.
    func remoteRoot(of table: String) -> String? {
        var seen: Set<String> = []
        func search(_ table: String) -> String? {
            guard seen.insert(table).inserted else { return nil }
            if roleOf(table) == .remoteRoot { return table }
            for edge in parents[table] ?? [] { if let found = search(edge.parent) { return found } }
            return nil
        }
        return search(table)
    }

    private var gatedFileTables: [Manifest.SyncedTable] {
        manifest.tables.filter { !$0.files.isEmpty && isGated($0.name) }
    }

    // MARK: - The kept predicate

    /// The kept predicate of `table`, as SQL over `alias` (a name the query gives the table's
    /// row, such as the table's own name in `SELECT … FROM todos WHERE <kept>`).
    func keptCondition(table: String, alias: String) -> String {
        var builder = Builder(graph: self)
        return builder.kept(table, alias: alias, depth: 0)
    }

    /// The tables the predicate of `table` reads (itself included): a write to any of them can
    /// change which of its rows are kept.
    func dependencies(of table: String) -> Set<String> {
        var builder = Builder(graph: self)
        _ = builder.kept(table, alias: "a", depth: 0)
        return builder.read.union([table])
    }

    /// Builds one predicate, with fresh aliases for every subquery.
    private struct Builder {
        let graph: SchemaGraph
        var next = 0
        var read: Set<String> = []
        /// Deeper than this, a chain is taken as not kept (only a key cycle gets there).
        static let depthLimit = 40

        mutating func alias() -> String {
            next += 1
            return "coven_k\(next)"
        }

        static func q(_ identifier: String) -> String { RowCapture.quote(identifier) }

        mutating func kept(_ table: String, alias a: String, depth: Int) -> String {
            guard depth < Self.depthLimit else { return "0" }
            if table == "coven_files" { return filesKept(alias: a, depth: depth) }
            switch graph.roleOf(table) {
            case .free, .remoteRoot, .underRemoteRoot:
                return "1"
            case .root(let column):
                let c = "\(a).\(Self.q(column))"
                var terms = ["(\(c) IS NOT NULL AND CAST(\(c) AS INTEGER) <> 0)"]
                for edge in graph.parents[table] ?? [] {
                    switch graph.roleOf(edge.parent) {
                    case .root, .inherits: terms.append(up(edge, from: a, depth: depth))
                    default: continue
                    }
                }
                return terms.joined(separator: " AND ")
            case .inherits(let edges), .inheritsAncestor(let edges):
                return edges.map { up($0, from: a, depth: depth) }.joined(separator: " AND ")
            case .ancestor:
                return ancestorKept(table, alias: a, depth: depth)
            }
        }

        /// `EXISTS` up one key into the parent's rule.
        mutating func up(_ edge: Edge, from a: String, depth: Int) -> String {
            let p = alias()
            read.insert(edge.parent)
            let rule = kept(edge.parent, alias: p, depth: depth + 1)
            return "EXISTS (SELECT 1 FROM main.\(Self.q(edge.parent)) \(p) WHERE \(p).\(Self.q(edge.parentColumn)) = \(a).\(Self.q(edge.column)) AND (\(rule)))"
        }

        /// The children that keep an ancestor alive: not those that inherit its own rule.
        func keepChildren(_ table: String) -> [Edge] {
            (graph.children[table] ?? []).filter { edge in
                if case .inheritsAncestor = graph.roleOf(edge.child) { return false }
                return true
            }
        }

        mutating func ancestorKept(_ table: String, alias a: String, depth: Int) -> String {
            let edges = keepChildren(table)
            let nested = (graph.selfEdges[table] ?? []).filter { $0.parentColumn == "id" }
            func down(_ edge: Edge, parent: String, builder: inout Builder) -> String {
                let c = builder.alias()
                builder.read.insert(edge.child)
                let rule = builder.kept(edge.child, alias: c, depth: depth + 1)
                return "EXISTS (SELECT 1 FROM main.\(Self.q(edge.child)) \(c) WHERE \(c).\(Self.q(edge.column)) = \(parent).\(Self.q(edge.parentColumn)) AND (\(rule)))"
            }
            guard !edges.isEmpty else { return "0" }
            guard !nested.isEmpty, edges.allSatisfy({ $0.parentColumn == "id" }) else {
                return "(" + edges.map { down($0, parent: a, builder: &self) }.joined(separator: " OR ") + ")"
            }
            // The ancestor and every row nested under it, to any depth.
            let sub = alias()
            let x = alias()
            let steps = nested.map { "SELECT \(x).id FROM main.\(Self.q(table)) \(x) JOIN \(sub) ON \(x).\(Self.q($0.column)) = \(sub).id" }
            let any = edges.map { down($0, parent: sub, builder: &self) }.joined(separator: " OR ")
            return "EXISTS (WITH RECURSIVE \(sub)(id) AS (SELECT \(a).id UNION \(steps.joined(separator: " UNION "))) SELECT 1 FROM \(sub) WHERE \(any))"
        }

        /// A file record is kept unless rows reference it and none of them is kept.
        mutating func filesKept(alias f: String, depth: Int) -> String {
            let gated = graph.gatedFileTables
            guard !gated.isEmpty else { return "1" }
            var keptReference: [String] = []
            var gatedReference: [String] = []
            for table in graph.manifest.tables where !table.files.isEmpty {
                read.insert(table.name)
                for column in table.files {
                    let r = alias()
                    let from = "SELECT 1 FROM main.\(Self.q(table.name)) \(r) WHERE \(r).\(Self.q(column.column)) = \(f).id"
                    if graph.isGated(table.name) {
                        gatedReference.append("EXISTS (\(from))")
                        keptReference.append("EXISTS (\(from) AND (\(kept(table.name, alias: r, depth: depth + 1))))")
                    } else {
                        keptReference.append("EXISTS (\(from))")
                    }
                }
            }
            return "(" + keptReference.joined(separator: " OR ") + " OR NOT (" + gatedReference.joined(separator: " OR ") + "))"
        }
    }
}

extension Device {
    /// The schema graph of this device's synced tables (foreign keys read now).
    func schemaGraph() throws -> SchemaGraph {
        try SchemaGraph(manifest: manifest, database: database)
    }
}
