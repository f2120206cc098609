import CovenKit
import Foundation

/// `coven snapshot`: publish a bootstrap snapshot of this device's rows.
struct SnapshotCommand: Command {
    static let name = "snapshot"
    static let abstract = "publish a bootstrap snapshot that 'coven join' starts new devices from"
    static let synopsis = ["[--json]"]
    static let discussion = """
    Pushes this device's writes first; then, in one read transaction, copies the kept rows of \
    every synced table, coven_files, the tombstones, the sync log and every device's applied \
    seq into a fresh database built by coven's schema steps and the manifest's migrations; packs \
    it with a small manifest as tar + zstd, sealed under the store key, streamed through a \
    temporary file; and stores it at snapshots/<device>-<seq>. A device that joins from it holds \
    the same rows as one that applied every change. Refuses ('invalid_state') while writes are \
    held unpublished by bound uploads. A store with circles gets one part more per circle this \
    device's member is in, snapshots/<device>-<seq>.<circle>, holding that circle's rows and file \
    records, sealed under the circle's key: the store's part holds none of them. Prints the \
    snapshot's storage key and each part's (nothing under -q), or one JSON object with --json.
    """
    static let options: [OptionSpec] = []
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        let report = try Snapshots(device).snapshot(stop: Stop.process)
        let manifest = report.manifest
        if context.json {
            try context.printJSON([
                "key": report.key, "bytes": report.bytes, "seq": manifest.seq, "frontier": manifest.frontier,
                "rows": manifest.rows, "objects": manifest.objects,
                "schema": ["coven": manifest.covenSchema, "migrations": manifest.migrations, "digest": manifest.migrationsDigest] as [String: Any],
                "pushed": ["changes": report.pushed.published, "entries": report.pushed.entries] as [String: Any],
                "parts": report.parts.map { ["circle": $0.circle, "generation": $0.generation, "key": $0.key, "rows": $0.rows, "objects": $0.objects, "bytes": $0.bytes] as [String: Any] },
            ])
        } else {
            context.report(report.key)
            context.note("snapshot of \(manifest.rows.counted("row")) naming \(manifest.objects.counted("stored object")), \(report.bytes.counted("byte")) sealed")
            for part in report.parts {
                context.report(part.key)
                context.note("part of circle \(part.circle): \(part.rows.counted("row")) naming \(part.objects.counted("stored object")), \(part.bytes.counted("byte")) sealed")
            }
        }
        return 0
    }
}
