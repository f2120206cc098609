import Foundation

// MARK: - The manifest

/// What a store declares: its namespaces, its synced tables and its migrations.
///
/// Read from the JSON document `coven init --manifest` and `coven migrate --manifest` take
/// (docs/manifest.md). Unknown keys are refused with their path, so a typo never passes silently.
public struct Manifest: Sendable, Equatable, Codable {
    /// The declared namespaces.
    public var namespaces: [Namespace]
    /// The synced tables.
    public var tables: [SyncedTable]
    /// The migrations, in order; each runs once.
    public var migrations: [String]

    /// A kind of file.
    public struct Namespace: Sendable, Equatable, Codable {
        /// The namespace's name.
        public var name: String
        /// Whose bytes: the person's originals, or bytes handed to coven.
        public var kind: FileKind
        /// Its cache budget in bytes, if it sets one.
        public var budget: Int64?
        /// Whether its files are kept offline.
        public var kept: Bool
    }

    /// A synced table's declaration.
    public struct SyncedTable: Sendable, Equatable, Codable {
        /// The table name.
        public var name: String
        /// What its ids mean.
        public var identity: RowIdentity
        /// The column holding the row's audience, if any.
        public var audienceColumn: String?
        /// The column holding the parent row's id, whose audience the row takes, if any.
        public var audienceFrom: String?
        /// The gate form.
        public var gate: Gate
        /// Its file reference columns.
        public var files: [FileColumn]
        /// In an owner-only table (`"owner_only": true`), the column coven fills with the id of
        /// the member whose device wrote the row: only that member's devices change or delete
        /// it (`not_owner`). Nil for any other table.
        public var ownerColumn: String? = nil
    }

    /// The row identity mode.
    public enum RowIdentity: String, Sendable, Equatable, Codable {
        case uuid
        case sharedKey = "shared-key"
    }

    /// A table's gate: at most one form.
    public enum Gate: Sendable, Equatable, Codable {
        case none
        case gatedBy(column: String)
        case gatedByDescendants
        case remoteRoot
    }

    /// A file reference column.
    public struct FileColumn: Sendable, Equatable, Codable {
        /// The column name.
        public var column: String
        /// Whether the row's write waits until the file is stored.
        public var bound: Bool
        /// The largest file a bound reference may name.
        public var boundLimit: Int64
        /// Whether the reference refuses a change once it names a file.
        public var writeOnce: Bool
    }

    /// The 1.5 MiB default limit of a bound reference.
    public static let defaultBoundLimit: Int64 = 1_572_864

    /// The namespace of that name.
    public func namespace(_ name: String) -> Namespace? { namespaces.first { $0.name == name } }

    /// The synced table of that name.
    public func table(_ name: String) -> SyncedTable? { tables.first { $0.name == name } }
}

/// Whose bytes a file holds.
public enum FileKind: String, Sendable, Equatable, Codable {
    /// The person's original at a path: never copied, moved, changed or deleted.
    case user
    /// Bytes handed to coven, which keeps its own copy until they are stored.
    case app
}

// MARK: - Parsing

extension Manifest {
    /// Parses and checks a manifest document.
    ///
    /// - Throws: ``CovenError`` `.manifest` naming the key path of the first problem.
    public init(json data: Data) throws {
        let root: Any
        do {
            root = try JSONSerialization.jsonObject(with: data, options: [])
        } catch {
            // Foundation's localizedDescription says only "the data is not in the correct
            // format"; the debug description says where.
            let nsError = error as NSError
            let cause = nsError.userInfo[NSDebugDescriptionErrorKey] as? String ?? nsError.localizedDescription
            throw CovenError(.manifest, "the manifest is not valid JSON", cause: cause)
        }
        let reader = JSONReader(path: "")
        let object = try reader.object(root)
        try reader.only(object, ["namespaces", "tables", "migrations"])
        var namespaces: [Namespace] = []
        for (index, item) in try reader.array(object["namespaces"] ?? [Any](), at: "namespaces").enumerated() {
            let namespace = try Self.namespace(item, at: "namespaces[\(index)]")
            guard !namespaces.contains(where: { $0.name == namespace.name }) else {
                throw CovenError(.manifest, "namespaces[\(index)].name: namespace '\(namespace.name)' is declared twice")
            }
            namespaces.append(namespace)
        }
        var tables: [SyncedTable] = []
        for (index, item) in try reader.array(object["tables"] ?? [Any](), at: "tables").enumerated() {
            let table = try Self.table(item, at: "tables[\(index)]")
            guard !tables.contains(where: { $0.name == table.name }) else {
                throw CovenError(.manifest, "tables[\(index)].name: table '\(table.name)' is declared twice")
            }
            tables.append(table)
        }
        var migrations: [String] = []
        for (index, item) in try reader.array(object["migrations"] ?? [Any](), at: "migrations").enumerated() {
            guard let sql = item as? String, !sql.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw CovenError(.manifest, "migrations[\(index)] must be a non-empty SQL string")
            }
            migrations.append(sql)
        }
        self.init(namespaces: namespaces, tables: tables, migrations: migrations)
    }

    /// One namespace of the manifest, at `path` (`namespaces[i]`).
    private static func namespace(_ item: Any, at path: String) throws -> Namespace {
        let r = JSONReader(path: path)
        let o = try r.object(item)
        try r.only(o, ["name", "kind", "budget", "kept"])
        let name = try r.name(o, "name")
        guard let kind = FileKind(rawValue: try r.string(o, "kind")) else {
            throw CovenError(.manifest, "\(r.path).kind must be 'user' or 'app'")
        }
        let budget = try o["budget"].map { try ByteSize.parse($0, at: "\(r.path).budget") }
        return Namespace(name: name, kind: kind, budget: budget, kept: try r.bool(o, "kept") ?? false)
    }

    /// One synced table of the manifest, at `path` (`tables[i]`).
    private static func table(_ item: Any, at path: String) throws -> SyncedTable {
        let r = JSONReader(path: path)
        let o = try r.object(item)
        try r.only(o, ["name", "identity", "audience_column", "audience_from", "gated_by", "gated_by_descendants", "remote_root", "files", "owner_only", "owner_column"])
        let name = try r.name(o, "name")
        guard !name.lowercased().hasPrefix("coven_"), !name.lowercased().hasPrefix("sqlite_") else {
            throw CovenError(.manifest, "\(r.path).name: '\(name)' uses a reserved prefix")
        }
        guard let identity = RowIdentity(rawValue: try r.string(o, "identity")) else {
            throw CovenError(.manifest, "\(r.path).identity must be 'uuid' or 'shared-key'")
        }
        let audienceColumn = try r.optionalName(o, "audience_column")
        let audienceFrom = try r.optionalName(o, "audience_from")
        if audienceColumn != nil && audienceFrom != nil {
            throw CovenError(.manifest, "\(r.path): a table has audience_column or audience_from, not both")
        }
        var gates: [Gate] = []
        if let column = try r.optionalName(o, "gated_by") { gates.append(.gatedBy(column: column)) }
        if try r.bool(o, "gated_by_descendants") == true { gates.append(.gatedByDescendants) }
        if try r.bool(o, "remote_root") == true { gates.append(.remoteRoot) }
        guard gates.count <= 1 else {
            throw CovenError(.manifest, "\(r.path): table '\(name)' has more than one gate form", hint: "a table has at most one of gated_by, gated_by_descendants, remote_root")
        }
        var files: [FileColumn] = []
        for (fileIndex, fileItem) in try r.array(o["files"] ?? [Any](), at: "\(r.path).files").enumerated() {
            let column = try fileColumn(fileItem, at: "\(r.path).files[\(fileIndex)]")
            guard !files.contains(where: { $0.column == column.column }) else {
                throw CovenError(.manifest, "\(r.path).files[\(fileIndex)].column: '\(column.column)' is declared twice")
            }
            files.append(column)
        }
        let ownerOnly = try r.bool(o, "owner_only") ?? false
        let ownerColumn = try r.optionalName(o, "owner_column")
        if ownerColumn != nil && !ownerOnly {
            throw CovenError(.manifest, "\(r.path).owner_column is set on a table that is not owner_only", hint: "add \"owner_only\": true, or drop owner_column")
        }
        if ownerOnly && identity == .sharedKey {
            throw CovenError(.manifest, "\(r.path): table '\(name)' is owner_only with identity 'shared-key'",
                             hint: "a shared key names one row every member writes: an owner-only table takes uuid ids")
        }
        let owner = ownerOnly ? (ownerColumn ?? "owner") : nil
        if let owner, owner == audienceColumn || owner == audienceFrom || files.contains(where: { $0.column == owner }) || owner == "id" || owner == "_updated_at" {
            throw CovenError(.manifest, "\(r.path).owner_column: '\(owner)' is already a column coven gives another role")
        }
        return SyncedTable(name: name, identity: identity, audienceColumn: audienceColumn, audienceFrom: audienceFrom, gate: gates.first ?? .none, files: files,
                           ownerColumn: owner)
    }

    /// One file column of a table, at `path` (`tables[i].files[j]`).
    private static func fileColumn(_ item: Any, at path: String) throws -> FileColumn {
        let f = JSONReader(path: path)
        let fo = try f.object(item)
        try f.only(fo, ["column", "bound", "bound_limit", "write_once"])
        let column = try f.name(fo, "column")
        let bound = try f.bool(fo, "bound") ?? false
        let limit = try fo["bound_limit"].map { try ByteSize.parse($0, at: "\(f.path).bound_limit") }
        if limit != nil && !bound {
            throw CovenError(.manifest, "\(f.path).bound_limit is set on a column that is not bound")
        }
        return FileColumn(column: column, bound: bound, boundLimit: limit ?? Manifest.defaultBoundLimit, writeOnce: try f.bool(fo, "write_once") ?? false)
    }

    /// Reads and parses the manifest file at `path`.
    ///
    /// - Throws: `.io` when the file cannot be read (missing, a folder, not a regular file:
    ///   with the system's reason), as any local read that fails; `.manifest` when what it
    ///   holds is not a valid manifest.
    public init(contentsOf path: String) throws {
        let display = PathText.display(path)
        func unreadable(_ code: Int32) -> CovenError {
            CovenError(.io, "cannot read manifest '\(display)'", cause: String(cString: strerror(code)), details: ["path": display])
        }
        // Non-blocking: a FIFO given as the manifest is refused, not waited on.
        let fd = PathText.withCString(path) { open($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else { throw unreadable(errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw unreadable(errno) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            if (info.st_mode & S_IFMT) == S_IFDIR { throw unreadable(EISDIR) }
            throw CovenError(.io, "cannot read manifest '\(display)'", cause: "not a regular file", details: ["path": display])
        }
        // A manifest is a small document; refuse anything absurd rather than read it whole.
        guard info.st_size <= 16 << 20 else { throw CovenError(.manifest, "manifest '\(display)' is larger than 16 MiB", details: ["path": display]) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if got < 0 {
                if errno == EINTR { continue }
                throw unreadable(errno)
            }
            if got == 0 { break }
            data.append(contentsOf: buffer[0..<got])
            if data.count > 16 << 20 { throw CovenError(.manifest, "manifest '\(display)' is larger than 16 MiB", details: ["path": display]) }
        }
        try self.init(json: data)
    }
}

/// Walks untyped JSON, naming the path of anything wrong.
struct JSONReader {
    var path: String

    /// A JSON `true`/`false`, told apart from the numbers 0 and 1 (Foundation gives both as
    /// NSNumber; a boolean's Objective-C type is `c`, on Linux too).
    static func boolean(_ value: Any) -> Bool? {
        if let flag = value as? Bool, !(value is Int) || String(describing: type(of: value)).contains("Bool") {
            if let number = value as? NSNumber {
                let type = String(cString: number.objCType)
                guard type == "c" || type == "B" else { return nil }
            }
            return flag
        }
        return nil
    }

    func object(_ value: Any) throws -> [String: Any] {
        guard let object = value as? [String: Any] else {
            throw CovenError(.manifest, "\(path.isEmpty ? "the manifest" : path) must be an object")
        }
        return object
    }

    func array(_ value: Any, at path: String) throws -> [Any] {
        guard let array = value as? [Any] else { throw CovenError(.manifest, "\(path) must be an array") }
        return array
    }

    func only(_ object: [String: Any], _ keys: Set<String>) throws {
        for key in object.keys.sorted() where !keys.contains(key) {
            let full = path.isEmpty ? key : "\(path).\(key)"
            throw CovenError(.manifest, "unknown key '\(full)'")
        }
    }

    func string(_ object: [String: Any], _ key: String) throws -> String {
        guard let value = object[key] else { throw CovenError(.manifest, "\(path).\(key) is missing") }
        guard let text = value as? String else { throw CovenError(.manifest, "\(path).\(key) must be a string") }
        return text
    }

    /// An SQL identifier: letters, digits and underscores, not starting with a digit.
    func name(_ object: [String: Any], _ key: String) throws -> String {
        let text = try string(object, key)
        guard Manifest.isIdentifier(text) else {
            throw CovenError(.manifest, "\(path).\(key): '\(text)' is not a plain SQL name (letters, digits, _)")
        }
        return text
    }

    func optionalName(_ object: [String: Any], _ key: String) throws -> String? {
        guard object[key] != nil, !(object[key] is NSNull) else { return nil }
        return try name(object, key)
    }

    func bool(_ object: [String: Any], _ key: String) throws -> Bool? {
        guard let value = object[key], !(value is NSNull) else { return nil }
        guard let flag = JSONReader.boolean(value) else {
            throw CovenError(.manifest, "\(path).\(key) must be true or false")
        }
        return flag
    }
}

extension Manifest {
    /// Whether `text` is a plain SQL identifier that needs no quoting.
    public static func isIdentifier(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, !text.isEmpty, text.utf8.count <= 128 else { return false }
        guard first == "_" || (first.isASCII && CharacterSet.letters.contains(first)) else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && CharacterSet.alphanumerics.contains($0)) }
    }
}

// MARK: - Sizes

/// Byte sizes as people write them: `268435456`, `"2GiB"`, `"500 MB"`.
public enum ByteSize {
    /// Parses a size: a whole number of bytes, or a number with a unit (B, KB, MB, GB, TB,
    /// KiB, MiB, GiB, TiB).
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        let unit = trimmed.dropFirst(digits.count).trimmingCharacters(in: .whitespaces)
        guard !digits.isEmpty, let number = Double(digits), number >= 0 else { return nil }
        let multipliers: [String: Double] = [
            "": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
            "KiB": 1024, "MiB": 1_048_576, "GiB": 1_073_741_824, "TiB": 1_099_511_627_776,
        ]
        guard let multiplier = multipliers[unit] else { return nil }
        let value = number * multiplier
        guard value < 9e18, value == value.rounded() || unit != "" else { return nil }
        return Int64(value.rounded())
    }

    static func parse(_ value: Any, at path: String) throws -> Int64 {
        if JSONReader.boolean(value) == nil, let number = value as? NSNumber {
            // Within Int64 before converting: a huge number (1e30) must be refused, not trap.
            guard number.doubleValue >= 0, number.doubleValue < 9e18, number.doubleValue == number.doubleValue.rounded() else {
                throw CovenError(.manifest, "\(path) must be a whole number of bytes or a size like \"2GiB\"")
            }
            return number.int64Value
        }
        if let text = value as? String, let size = parse(text) { return size }
        throw CovenError(.manifest, "\(path) must be a whole number of bytes or a size like \"2GiB\"")
    }

    /// A size for people: `1.5 GiB`.
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}

extension Manifest {
    /// The namespace, checked to exist and to be of `kind`.
    ///
    /// - Throws: `.undeclaredNamespace`, `.namespaceKind`.
    func namespace(_ name: String, kind: FileKind) throws -> Manifest.Namespace {
        guard let namespace = self.namespace(name) else {
            throw CovenError(.undeclaredNamespace, "namespace '\(name)' is not declared in the manifest", details: ["namespace": name])
        }
        guard namespace.kind == kind else {
            throw CovenError(.namespaceKind, "namespace '\(name)' holds \(namespace.kind == .user ? "the person's originals" : "app-provided bytes"), not \(kind == .user ? "a person's original" : "app bytes")",
                             hint: kind == .user ? "stage app bytes without --user" : "stage a person's original with --user", details: ["namespace": name])
        }
        return namespace
    }
}
