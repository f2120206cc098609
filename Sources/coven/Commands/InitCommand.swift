import CovenKit
import Foundation

/// `coven init`: create a store and this device.
struct InitCommand: Command {
    static let name = "init"
    static let abstract = "create a store at a storage URL and this device, its first"
    static let synopsis = ["--storage URL --manifest FILE [--name NAME] [--member NAME]"]
    static let discussion = """
    Creates the store (store.json at the storage, a random store id and a random 256-bit store \
    key) and this device: its database at --db with the folder beside it. Refuses to overwrite \
    an existing store or device. The store key is written to the device folder with mode 0600 \
    and printed only by 'coven key export'. With --member NAME the store is one of members from \
    the start: NAME is its first member, the owner, whose new keys this device keeps (as 'coven \
    member init NAME' does on a store made without it; see coven-member(1)); if that step fails \
    after the store was made, the error says so and 'coven member init NAME' finishes it.
    """
    static let options = [
        OptionSpec("storage", value: "URL", help: "where the store lives: file:///DIR or s3://BUCKET/PREFIX"),
        OptionSpec("manifest", value: "FILE", help: "the manifest declaring namespaces, synced tables and migrations", completion: .file),
        OptionSpec("name", value: "NAME", help: "this device's name (default: the host name)"),
        OptionSpec("member", value: "NAME", help: "make NAME the store's first member, the owner, with keys of its own"),
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
        let storage = try StorageLocation(parsing: storageText)
        let manifest = try Manifest(contentsOf: manifestPath)
        let device = try Device.create(paths: DevicePaths(database: context.databasePath), storage: storage, manifest: manifest,
                                       name: invocation.value("name"))
        var member: [String: Any]?
        if let name = invocation.value("member") {
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
}
