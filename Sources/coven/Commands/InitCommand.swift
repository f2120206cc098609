import CovenKit
import Foundation

/// `coven init`: create a store and this device.
struct InitCommand: Command {
    static let name = "init"
    static let abstract = "create a store at a storage URL, and this device as its first device"
    static let synopsis = ["--storage URL --manifest FILE [--name NAME] [--member NAME | --no-member]"]
    static let discussion = """
    Creates the store (store.json at the storage, a random store id and a random 256-bit store \
    key) and this device: its database at --db with the folder beside it. Refuses to overwrite \
    an existing store or device. The store is one of members (coven-member(1)): its creator is \
    its first member, the owner and an admin, named --member NAME or, without it, the login \
    name ($LOGNAME, $USER, then the account's name); this device keeps the member's new keys. \
    Its other devices join with the member's identity ('coven member export', or 'coven key \
    export', which prints it in a store of members); other people get keys of their own with \
    'coven member add'. If that step fails after the store was made, the error says so and \
    'coven member init NAME' finishes it.

    --no-member makes a store of one key, as releases before members did: every device holds \
    the store key (written to the device folder with mode 0600, printed only by 'coven key \
    export') and reads and writes everything. 'coven member init NAME' makes it a store of \
    members later, on any of its devices.
    """
    static let options = [
        OptionSpec("storage", value: "URL", help: "where the store lives: file:///DIR or s3://BUCKET/PREFIX"),
        OptionSpec("manifest", value: "FILE", help: "the manifest declaring namespaces, synced tables and migrations", completion: .file),
        OptionSpec("name", value: "NAME", help: "this device's name (default: the host name)"),
        OptionSpec("member", value: "NAME", help: "the name of the store's first member, the owner (default: the login name)"),
        OptionSpec("no-member", help: "a store of one key shared by every device, without members"),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let storageText = invocation.value("storage") else { throw CovenError(.usage, "missing --storage URL") }
        guard let manifestPath = invocation.value("manifest") else { throw CovenError(.usage, "missing --manifest FILE") }
        if let name = invocation.value("name"), name.trimmingCharacters(in: .whitespaces).isEmpty {
            throw CovenError(.usage, "--name takes a name, not an empty word", hint: "leave --name out to use the host name")
        }
        if let member = invocation.value("member"), member.trimmingCharacters(in: .whitespaces).isEmpty {
            throw CovenError(.usage, "--member takes a name, not an empty word")
        }
        if invocation.has("no-member"), invocation.value("member") != nil {
            throw CovenError(.usage, "--member and --no-member: pass one")
        }
        let memberName = invocation.has("no-member") ? nil : (invocation.value("member") ?? loginName())
        let storage = try StorageLocation(parsing: storageText)
        let manifest = try Manifest(contentsOf: manifestPath)
        let device = try DeviceSetup.create(paths: DevicePaths(database: context.databasePath), storage: storage, manifest: manifest,
                                       name: invocation.value("name"))
        var member: [String: Any]?
        if let name = memberName {
            do {
                let identity = try Members(device).establish(name: name)
                member = ["id": try Members(device).memberID() ?? "", "name": name, "recipient": identity.recipient.description]
            } catch var error as CovenError {
                error.message = "the store and this device were made, but not the first member: " + error.message
                error.hint = "run 'coven member init \(name)' to finish"
                throw error
            }
        }
        if context.json {
            var object: [String: Any] = [
                "store": ["id": device.storeID, "storage": device.storage.description],
                "device": ["id": device.deviceID, "name": device.deviceName, "database": device.paths.database],
            ]
            if let member { object["member"] = member }
            try context.printJSON(object)
        } else {
            context.line(device.storeID)
            context.note("created store \(device.storeID) at \(device.storage) with device '\(device.deviceName)' (\(device.deviceID))")
            if let member { context.note("member '\(member["name"] ?? "")' (owner): recipient \(member["recipient"] ?? "")") }
        }
        return 0
    }

    /// The login name, the default name of a store's first member: `$LOGNAME`, `$USER`, then
    /// the name of the account running coven (as Python's getpass.getuser), else "owner".
    static func loginName() -> String {
        let environment = ProcessInfo.processInfo.environment
        for variable in ["LOGNAME", "USER"] {
            if let name = environment[variable]?.trimmingCharacters(in: .whitespaces), !name.isEmpty { return name }
        }
        if let entry = getpwuid(geteuid()), let pointer = entry.pointee.pw_name {
            let name = String(cString: pointer).trimmingCharacters(in: .whitespaces)
            if !name.isEmpty { return name }
        }
        return "owner"
    }
}
