import CovenKit
import Foundation

/// `coven migrate`: apply a manifest's new migrations.
struct MigrateCommand: Command {
    static let name = "migrate"
    static let abstract = "apply the new migrations of a manifest and record it"
    static let synopsis = ["--manifest FILE"]
    static let discussion = """
    Runs, in one transaction, the migrations added at the end of the manifest since the device \
    last applied it, checks every synced table again, and records the manifest. A migration \
    that was applied and has changed since is refused ('migration'); so is a result that breaks \
    a synced-table rule ('schema'). Then stores the manifest, sealed, as the store's, which \
    'coven join' starts new devices with. Prints the position of each migration applied.
    """
    static let options = [
        OptionSpec("manifest", value: "FILE", help: "the manifest to migrate to", completion: .file),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let path = invocation.value("manifest") else { throw CovenError(.usage, "missing --manifest FILE") }
        let manifest = try Manifest(contentsOf: path)
        let device = try context.openDevice()
        let lock = try device.lock(wait: !context.noWait)
        defer { _ = lock }
        let applied = try device.migrate(to: manifest)
        // The store's copy, which 'coven join' starts new devices with.
        do {
            try StoreSync(device).publishManifest()
        } catch var error as CovenError {
            error.message = "migrated this device, but the store's manifest was not updated: " + error.message
            error.hint = "run 'coven migrate' again with the same manifest once storage answers"
            throw error
        }
        if context.json {
            try context.printJSON(["applied": applied])
        } else {
            applied.forEach { context.line(String($0)) }
        }
        return 0
    }
}
