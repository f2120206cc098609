import CovenKit
import Foundation

/// `coven join`: make this device a new device of an existing store.
struct JoinCommand: Command {
    static let name = "join"
    static let abstract = "make a new device of an existing store, then pull its rows"
    static let synopsis = ["URL [--key-file FILE | --identity FILE] [--name NAME]"]
    static let discussion = """
    Reads the store key (the line 'coven key export' prints on one of the store's devices) from \
    --key-file, or from stdin when it is not a terminal; checks it against the store's sealed \
    manifest before writing anything (a wrong key is 'integrity'); builds the device at --db \
    with the store's manifest and a fresh device id, starting from the newest snapshot under \
    snapshots/ whose schema it can read (one that fails authentication, is truncated or is of a \
    newer schema is passed over, with a warning, for an older one or for none); announces it \
    under devices/; then pulls the changes the snapshot does not hold, showing how many it \
    applied on a line of stderr while that is a terminal. A name that a device of the store not gone for good holds is refused ('exists', naming that device); without --name the device takes the host name, or the host name with -2, -3, … when that is taken; a name holding a control character (a tab, a newline) is refused ('usage'). Prints the new device's id, or one JSON object with --json.

    In a store of members, a device joins as one of them: --identity FILE names the member's \
    identity ('coven member keygen' or 'coven member export' wrote it). The store's keys then \
    come from its chain of key generations, opened with the identity, every link checked; the \
    new device's entry is vouched for by the member. No store key is needed, and a join by key \
    of such a store is refused ('usage'). An identity on no roster of the store is 'not_found'. \
    --key-file (or stdin) may hold the identity too: in a store of members 'coven key export' \
    prints the member's identity, so scripts that pass its line on join as that member.

    Run again after a kill or a failure, join goes on: when the device at --db is of this store \
    (its pull was stopped) it finishes the pull; what a join stopped before the device was made \
    left (<db>.d/ and <db>.init) is removed and the join starts clean. A device of another store \
    at --db is refused ('already_exists'), naming it.
    """
    static let options = [
        OptionSpec("key-file", value: "FILE", help: "the file holding the store key (default: stdin)", completion: .file),
        OptionSpec("identity", value: "FILE", help: "join as the member whose identity FILE holds (a store of members)", completion: .file),
        OptionSpec("name", value: "NAME", help: "this device's name (default: the host name)"),
    ]
    static let arguments = [ArgumentSpec("URL", help: "the store's storage URL: file:///DIR or s3://BUCKET/PREFIX")]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let url = invocation.arguments.first else { throw CovenError(.usage, "missing the store's URL") }
        if let name = invocation.value("name"), name.trimmingCharacters(in: .whitespaces).isEmpty {
            throw CovenError(.usage, "--name takes a name, not an empty word", hint: "leave --name out to use the host name")
        }
        let storage = try StorageLocation(parsing: url)
        let device: Device
        var keyStore: String?
        var joined = SnapshotJoin()
        if let identityPath = invocation.value("identity") {
            if invocation.value("key-file") != nil { throw CovenError(.usage, "--identity and --key-file: pass one") }
            let identity = try decodingIdentity { try MemberIdentity(contentsOf: identityPath) }
            device = try DeviceSetup.join(paths: DevicePaths(database: context.databasePath), storage: storage, identity: identity, name: invocation.value("name"), started: { joined = $0 })
        } else {
            let (text, source) = try readKeyText(invocation, context)
            if MemberIdentity.looksLikeIdentity(text) {
                // What 'coven key export' prints in a store of members: the member's identity.
                let identity = try decodingIdentity { try MemberIdentity(text: text, source: source) }
                device = try DeviceSetup.join(paths: DevicePaths(database: context.databasePath), storage: storage, identity: identity, name: invocation.value("name"), started: { joined = $0 })
            } else {
                let key = try parseKey(text)
                keyStore = key.store
                device = try DeviceSetup.join(paths: DevicePaths(database: context.databasePath), storage: storage, storeKey: key.bytes, name: invocation.value("name"), started: { joined = $0 })
            }
        }
        if let store = keyStore, store != device.storeID {
            context.note("warning: the key names store \(store), but the store at \(storage) is \(device.storeID)")
        }
        return try pull(device, storage: storage, joined: joined, context)
    }

    /// The text of --key-file or stdin, and where it came from: a store key, or a member's
    /// identity ('coven key export' in a store of members).
    private static func readKeyText(_ invocation: Invocation, _ context: CommandContext) throws -> (text: String, source: String) {
        if let path = invocation.value("key-file") {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
                throw CovenError(.usage, "--key-file '\(path)' is a folder, not a key file", hint: "pass the file holding the line 'coven key export' printed",
                                 details: ["path": path])
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CovenError.posix("read the key file", path: path)
            }
            return (String(decoding: data, as: UTF8.self), path)
        } else {
            guard !context.stdinIsTerminal else {
                throw CovenError(.usage, "no store key: pass --key-file FILE or pipe it on stdin", hint: "on a device of the store: coven key export")
            }
            return (String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self), "stdin")
        }
    }

    /// An identity file join was given to read that is not one (damaged, no secret line, a
    /// checksum that does not match) is bad data, `decoding` (6), as a bad store key is: the
    /// command line itself was right.
    private static func decodingIdentity(_ read: () throws -> MemberIdentity) throws -> MemberIdentity {
        do {
            return try read()
        } catch var error as CovenError where error.code == .usage {
            error.code = .decoding
            throw error
        }
    }

    /// Pulls what the device's snapshot does not hold, and prints the report.
    private static func pull(_ device: Device, storage: StorageLocation, joined: SnapshotJoin, _ context: CommandContext) throws -> Int32 {
        // The pull may replay a long history: a line of progress on a terminal, as sync shows.
        let line = StatusLine(context)
        var applied = 0, rows = 0
        let report = try StoreSync(device).sync(push: false, pull: true, stop: Stop.process) { step in
            guard case .applied(_, _, let entries) = step else { return }
            applied += 1
            rows += entries
            if line.isDue() { line.show("join: applied \(applied.counted("change")) (\(rows.counted("row")))") }
        }
        line.finish()
        // A gap or damage met while pulling: the device is made, its stream of that device stops
        // there (exit 10, as sync).
        let status = SyncProblemsText.incomplete(report) ? ExitCodes.partial : ExitCodes.success
        let snapshotKey = joined.key
        let snapshotRows = joined.manifest?.rows ?? 0
        let skipped = joined.skipped
        if context.json {
            var used: Any = NSNull()
            if let snapshotKey { used = ["key": snapshotKey, "seq": joined.manifest?.seq ?? 0, "rows": snapshotRows] as [String: Any] }
            let passed: [[String: String]] = skipped.map { ["key": $0.key, "reason": $0.reason, "message": $0.message] }
            try context.printJSON([
                "store": ["id": device.storeID, "storage": device.storage.description],
                "device": ["id": device.deviceID, "name": device.deviceName, "database": device.paths.database],
                "snapshot": used,
                "skipped_snapshots": passed,
                "pulled": (["changes": report.pulled.changes, "entries": report.pulled.entries] as [String: Any])
                    .merging(SyncProblemsText.pulledJSON(report.pulled)) { first, _ in first },
                "exit_code": status,
            ])
            SyncProblemsText(device: device, context: context).write(report)
        } else {
            context.line(device.deviceID)
            for skip in skipped {
                context.note("warning: passed over snapshot '\(skip.key)' (\(skip.reason)): \(skip.message)")
            }
            if joined.resumed {
                context.note("device '\(device.deviceName)' had joined already: finished its pull")
            } else if let snapshotKey {
                context.note("started from snapshot '\(snapshotKey)' (\(snapshotRows.counted("row")))")
            } else if !skipped.isEmpty {
                context.note("no snapshot could be used: pulling every change")
            }
            context.note("joined store \(device.storeID) at \(device.storage) as device '\(device.deviceName)'; pulled \(report.pulled.changes.counted("change")), \(report.pulled.entries.counted("row"))")
            SyncProblemsText(device: device, context: context).write(report)
        }
        return status
    }

    /// `coven-store-key-v1:STORE:HEX`, or the 64 hex digits alone.
    static func parseKey(_ text: String) throws -> (store: String?, bytes: [UInt8]) {
        let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !line.isEmpty else {
            throw CovenError(.decoding, "no store key: the key file or stdin is empty", hint: "print it with 'coven key export' on a device of the store")
        }
        var store: String?
        var hex = line
        if line.hasPrefix("coven-store-key-v1:") {
            let parts = line.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 3 else {
                throw CovenError(.decoding, "a store key reads 'coven-store-key-v1:STORE:KEY'", hint: "print it with 'coven key export' on a device of the store")
            }
            store = String(parts[1])
            hex = String(parts[2])
        }
        guard hex.count == 64, let bytes = [UInt8](hex: hex) else {
            throw CovenError(.decoding, "a store key is 'coven-store-key-v1:STORE:KEY' with KEY 64 hex digits", hint: "print it with 'coven key export' on a device of the store")
        }
        return (store, bytes)
    }
}
