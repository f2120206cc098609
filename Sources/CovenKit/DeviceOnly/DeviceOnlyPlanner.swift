import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Checks every input of a make-device-only call and lays out its copies, changing nothing:
/// the folder, each file (a person's, in the cloud, this member's to change), the paths (no
/// two that are one on a case-folding volume, no link on the way, nothing already there) and
/// the folders to make.
///
/// ```swift
/// let plan = try DeviceOnlyPlanner(device: device).plan(folder: "/music", requests: requests)
/// ```
struct DeviceOnlyPlanner {
    let device: Device

    /// The plan of `requests` into `given`; changes nothing.
    func plan(folder given: String, requests: [DeviceOnlyRequest]) throws -> DeviceOnlyPlan {
        let folder = try checkedFolder(given)
        var byFile: [String: DeviceOnlyRequest] = [:]
        var copies: [PlannedCopy] = []
        var writable: Set<String>?
        let remoteColumns = try remoteRootColumns()
        for request in requests {
            try request.checkNotEmpty()
            if let first = byFile[request.file] {
                throw CovenError(.usage, "\(request.input): file '\(request.file)' is given twice (first in \(first.input))", details: ["input": request.input, "file": request.file])
            }
            byFile[request.file] = request
            let record = try checkedRecord(request, remoteColumns: remoteColumns, writable: &writable)
            let written = request.names.map(DeviceOnlyName.written)
            let final = folder + "/" + written.joined(separator: "/")
            let parent = (final as NSString).deletingLastPathComponent
            copies.append(PlannedCopy(request: request, record: record, written: written, folder: parent, final: final,
                                      temporary: parent + "/.coven-" + Identifier.objectName() + ".tmp"))
        }
        try checkClashes(copies)
        return DeviceOnlyPlan(folder: folder, copies: copies, folders: try foldersToMake(copies, in: folder))
    }

    /// The folder given, absolute and without trailing slashes: valid Unicode (no byte that
    /// came in as an escape), and a folder.
    private func checkedFolder(_ given: String) throws -> String {
        if given.unicodeScalars.contains(where: { $0.value >= PathText.escapeBase && $0.value <= PathText.escapeBase + 0xFF }) {
            throw CovenError(.notUnicode, "the folder '\(PathText.display(given))' is not valid Unicode", details: ["input": "--folder", "path": PathText.display(given)])
        }
        var folder = DevicePaths.absolute(given)
        while folder.count > 1 && folder.hasSuffix("/") { folder.removeLast() }
        var info = stat()
        guard stat(folder, &info) == 0 else {
            throw CovenError.posix("open folder", path: folder)
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw CovenError(.io, "'\(folder)' is not a folder", details: ["path": folder])
        }
        return folder
    }

    /// The record of the request's file, once it is shown to be a person's file in the cloud
    /// that this device's member may make device-only. `writable`: the circles this member
    /// writes, read once when a file of a circle first asks.
    private func checkedRecord(_ request: DeviceOnlyRequest, remoteColumns: [(table: String, column: String, root: String)],
                               writable: inout Set<String>?) throws -> FileRecord {
        let details = ["input": request.input, "file": request.file, "path": request.given]
        guard let record = try device.fileRecord(request.file) else {
            throw CovenError(.fileAbsent, "\(request.input): no file '\(request.file)' on this device", details: details)
        }
        if device.manifest.namespace(record.namespace)?.kind != .user {
            throw CovenError(.namespaceKind, "\(request.input): file '\(request.file)' holds app bytes, not a person's file", hint: "make-device-only brings back files of user namespaces only", details: details)
        }
        if let root = try remoteRootNaming(request.file, columns: remoteColumns) {
            throw CovenError(.remoteRoot, "\(request.input): file '\(request.file)' belongs to a row under remote root '\(root)', whose files stay in the cloud",
                             details: details.merging(["remote_root": root]) { first, _ in first })
        }
        // A file of a circle this member was removed from: its record stays here, its rows
        // are the circle's to change.
        if record.audience != RowAudiences.store {
            let audiences = try writable ?? Circles(device).writableAudiences()
            writable = audiences
            if !audiences.contains(record.audience) {
                throw CovenError(.notInCircle, "\(request.input): file '\(request.file)' is of circle '\(record.audience)', which this device's member is no longer in",
                                 hint: "a member of the circle makes it device-only", details: details.merging(["circle": record.audience]) { first, _ in first })
            }
        }
        if let owned = try OwnedRows(device: device).otherOwner(naming: request.file) {
            throw CovenError(.notOwner, "\(request.input): file '\(request.file)' is named by row '\(owned.row)' of owner-only table '\(owned.table)', member \(owned.owner)'s",
                             hint: "only its owner's devices make it device-only", details: details.merging(["table": owned.table, "owner": owned.owner]) { first, _ in first })
        }
        guard record.coordinates.at == .stored, record.hash != nil else {
            throw CovenError(.notInCloud, "\(request.input): file '\(request.file)' is on one device only, not in the cloud",
                             details: details.merging(["device": record.coordinates.device ?? ""]) { first, _ in first })
        }
        return record
    }

    /// Two paths that are one after the rule, case folding or Unicode normalization; a file
    /// where another path needs a folder is one too.
    private func checkClashes(_ copies: [PlannedCopy]) throws {
        var files: [String: DeviceOnlyRequest] = [:]
        var folders: [String: DeviceOnlyRequest] = [:]
        for copy in copies {
            let key = DeviceOnlyName.clashKey(copy.written)
            if let other = files[key] ?? folders[key] {
                throw clash(copy.request, other)
            }
            files[key] = copy.request
            for depth in 1..<max(1, copy.written.count) {
                let folderKey = DeviceOnlyName.clashKey(Array(copy.written.prefix(depth)))
                if let other = files[folderKey] { throw clash(copy.request, other) }
                if folders[folderKey] == nil { folders[folderKey] = copy.request }
            }
        }
    }

    /// The folders to make, shallowest first, walking each path from the folder down: a link
    /// on the way, or anything already where a copy goes, is refused.
    private func foldersToMake(_ copies: [PlannedCopy], in folder: String) throws -> [String] {
        var toMake: [String] = []
        var planned: Set<String> = []
        for copy in copies {
            var path = folder
            for (index, name) in copy.written.enumerated() {
                path += "/" + name
                let isLast = index == copy.written.count - 1
                var info = stat()
                if lstat(path, &info) != 0 {
                    guard errno == ENOENT else { throw CovenError.posix("look at", path: path) }
                    if !isLast, planned.insert(path).inserted { toMake.append(path) }
                    continue
                }
                if (info.st_mode & S_IFMT) == S_IFLNK { throw DeviceOnlyMaker.pathError(.link, copy.request, path: path) }
                if isLast || (info.st_mode & S_IFMT) != S_IFDIR { throw DeviceOnlyMaker.pathError(.exists, copy.request, path: path) }
            }
        }
        toMake.sort { $0.split(separator: "/").count < $1.split(separator: "/").count }
        return toMake
    }

    /// The file columns of the tables under a remote root, each with its root (the schema's
    /// graph is built once per call, not once per file).
    private func remoteRootColumns() throws -> [(table: String, column: String, root: String)] {
        let graph = try device.schemaGraph()
        return device.manifest.tables.filter { !$0.files.isEmpty }.flatMap { table -> [(table: String, column: String, root: String)] in
            guard let root = graph.remoteRoot(of: table.name) else { return [] }
            return table.files.map { (table.name, $0.column, root) }
        }
    }

    /// The remote root whose row (or a descendant's) names `file`, if any, among `columns`
    /// (``remoteRootColumns()``).
    private func remoteRootNaming(_ file: String, columns: [(table: String, column: String, root: String)]) throws -> String? {
        for (table, column, root) in columns {
            if try device.database.scalar("SELECT count(*) FROM main.\(RowCapture.quote(table)) WHERE \(RowCapture.quote(column)) = ?1", [file]).intValue ?? 0 > 0 {
                return root
            }
        }
        return nil
    }

    private func clash(_ request: DeviceOnlyRequest, _ other: DeviceOnlyRequest) -> CovenError {
        CovenError(.clash, "\(request.input): the path '\(request.given)' of file '\(request.file)' is one with the path '\(other.given)' of file '\(other.file)' (\(other.input))",
                   hint: "macOS and Windows volumes hold names equal after case folding and Unicode normalization as one",
                   details: ["input": request.input, "file": request.file, "path": request.given,
                             "other_input": other.input, "other_file": other.file, "other_path": other.given])
    }
}
