import CovenKit
import Foundation

/// `coven status`: the whole device at a glance.
struct StatusCommand: Command {
    static let name = "status"
    static let abstract = "show the store, this device, its files, uploads and cache"
    static let synopsis = ["[--json]"]
    static let discussion = """
    Prints the store and device, counts of files by where they are, the upload queue and the \
    file cache. With --json, one object whose keys docs/json.md documents; keys are only ever \
    added. Reads only: never waits for the device lock.
    """
    static let options: [OptionSpec] = []
    static let mutates = false
    static let category = CommandCategory.porcelain

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        let status = try DeviceStatus(of: device)
        if context.json {
            var object = json(status)
            var about = object["device"] as? [String: Any] ?? [:]
            about["removed_at"] = try StoreSync(device).removedAt() ?? NSNull()
            object["device"] = about
            let trash = try Trash(device).summary()
            object["trash"] = [
                "rows": trash.rows, "files": trash.files, "bytes": trash.bytes, "oldest": trash.oldest.map { $0 as Any } ?? NSNull(),
                "retention_seconds": trash.retention,
                "last_mass_delete": try Trash(device).lastMassDelete().map(SyncProblemsText.json) ?? NSNull(),
            ] as [String: Any]
            try context.printJSON(object)
            return 0
        }
        let s = status
        var lines = [
            "store    \(s.storeID) at \(s.storage)",
            "device   \(s.deviceID) '\(DeviceNameText.escape(s.deviceName))'",
            "files    \(s.files.total) in all: \(s.files.stored) stored, \(s.files.uploading) uploading, \(s.files.deviceOnlyHere) on this device only, \(s.files.deviceOnlyElsewhere) on another device only, \(s.files.missing) missing",
            "uploads  \(s.uploads.queued) queued, \(s.uploads.sending) sending, \(s.uploads.failed) failed\(s.uploads.paused ? ", paused" : ""); \(ByteSize.format(s.uploads.bytesConfirmed)) of \(ByteSize.format(s.uploads.bytesTotal)) confirmed",
        ]
        let budget = s.cache.budget.map { ByteSize.format($0) } ?? "keep-all"
        lines.append("cache    \(ByteSize.format(s.cache.used)) used of \(budget)\(s.cache.budgetIsDefault ? " (default)" : ""), \(ByteSize.format(s.cache.partial)) partial")
        lines.append("kept     \(s.cache.heldCount) held (\(ByteSize.format(s.cache.heldBytes)))" + s.cache.notHeld.map { ", \($0.count) \($0.reason)" }.joined())
        if s.staged > 0 { lines.append("staged   \(s.staged) waiting for a write") }
        var sync = "sync     last push \(s.sync.lastPush ?? "never"), last pull \(s.sync.lastPull ?? "never"); "
            + "\(s.sync.waiting.counted("write")) not yet published"
        if s.sync.heldByUploads > 0 { sync += " (\(s.sync.heldByUploads) held by bound uploads)" }
        if s.sync.frozen > 0 { sync += " (\(s.sync.frozenWrites) in \(s.sync.frozen.counted("change")) waiting for storage)" }
        if s.sync.lostValues > 0 { sync += ", \(s.sync.lostValues.counted("lost value"))" }
        sync += "; \(s.sync.devices.counted("other device"))" + (s.sync.goneDevices > 0 ? " (\(s.sync.goneDevices) gone)" : "")
        lines.append(sync)
        let trash = try Trash(device).summary()
        lines.append("trash    \(trash.rows.counted("row")), \(trash.files.counted("file")), \(ByteSize.format(trash.bytes))"
                     + (trash.oldest.map { ", the oldest from \($0)" } ?? "") + "; kept \(TrashCommand.formatDuration(trash.retention))")
        if let mass = try Trash(device).lastMassDelete() {
            let rows = mass.tables.reduce(0) { $0 + $1.rows }
            lines.append("deletes  the last mass delete: \(rows.counted("row")) by device \(mass.deviceName.map { "'\(DeviceNameText.escape($0))' " } ?? "")(\(mass.device)) in change \(mass.device):\(mass.seq), applied \(mass.appliedAt); '\(mass.undo)' brings them back")
        }
        if let removed = try StoreSync(device).removedAt() {
            lines.append("removed  this device was removed from the store at \(removed): nothing written here will be published; make a new device with 'coven join'")
        }
        if !s.sync.keyUnavailable.isEmpty {
            lines.append("pending  changes of \(s.sync.keyUnavailable.count.counted("device")) wait for a key generation this device has not read yet: "
                         + s.sync.keyUnavailable.sorted(by: { $0.key < $1.key }).map { "\($0.key) at \($0.value)" }.joined(separator: ", "))
        }
        for loss in s.sync.keyChainsBehind {
            lines.append("keys     \(KeyChainLossText.describe(loss))")
        }
        for problem in s.sync.problems {
            lines.append("sync     stopped at change \(problem.seq) of device \(problem.device): "
                         + (problem.kind == .gap ? "missing from storage" : "damaged in storage, reported to that device") + " ('coven sync' says more)")
        }
        if let oldest = s.fsckDamage.first {
            lines.append("fsck     \(s.fsckDamage.count.counted("problem")) found and not mended since (the first at \(Timestamp.iso8601(oldest.foundAt))): "
                         + "'coven fsck' lists them, 'coven fsck --repair' mends what a local copy holds")
        }
        lines.forEach(context.line)
        return 0
    }

    static func json(_ s: DeviceStatus) -> [String: Any] {
        [
            "store": ["id": s.storeID, "storage": s.storage],
            "device": ["id": s.deviceID, "name": s.deviceName, "database": s.database],
            "manifest": [
                "namespaces": s.namespaces.map { ["name": $0.name, "kind": $0.kind.rawValue, "kept": $0.kept, "budget": $0.budget.map { $0 as Any } ?? NSNull()] },
                "tables": s.tables,
                "migrations": s.migrations,
            ],
            "files": [
                "total": s.files.total, "stored": s.files.stored, "device_only_here": s.files.deviceOnlyHere,
                "device_only_elsewhere": s.files.deviceOnlyElsewhere, "uploading": s.files.uploading, "missing": s.files.missing,
            ],
            "staged": s.staged,
            "uploads": [
                "queued": s.uploads.queued, "sending": s.uploads.sending, "failed": s.uploads.failed, "paused": s.uploads.paused,
                "bytes_confirmed": s.uploads.bytesConfirmed, "bytes_total": s.uploads.bytesTotal,
            ],
            "outbox": s.outbox,
            "pending": ["key_unavailable": s.sync.keyUnavailable, "unread_sections": s.sync.unreadSections] as [String: Any],
            "sync": [
                "last_push": s.sync.lastPush.map { $0 as Any } ?? NSNull(), "last_pull": s.sync.lastPull.map { $0 as Any } ?? NSNull(),
                "waiting": s.sync.waiting, "held_by_uploads": s.sync.heldByUploads, "frozen": s.sync.frozen,
                "lost_values": s.sync.lostValues, "devices": s.sync.devices, "gone_devices": s.sync.goneDevices,
                "key_unavailable": s.sync.keyUnavailable,
                "key_chains_behind": s.sync.keyChainsBehind.map(KeyChainLossText.json),
                "problems": s.sync.problems.map { problem -> [String: Any] in
                    var item: [String: Any] = ["device": problem.device, "seq": problem.seq, "kind": problem.kind.rawValue, "object": problem.object]
                    if let message = problem.message { item["message"] = message }
                    return item
                },
            ] as [String: Any],
            "fsck": [
                "damage": s.fsckDamage.map { ["key": $0.key, "subject": $0.subject, "result": $0.result, "found_at": Timestamp.iso8601($0.foundAt)] },
            ],
            "file_cache": [
                "budget": s.cache.budget.map { $0 as Any } ?? NSNull(),
                "budget_is_default": s.cache.budgetIsDefault,
                "used": s.cache.used,
                "partial": s.cache.partial,
                "attachments": [
                    "held": ["count": s.cache.heldCount, "bytes": s.cache.heldBytes],
                    "not_held_by_reason": s.cache.notHeld.map { ["reason": $0.reason, "count": $0.count, "bytes": $0.bytes, "unstated": $0.unstated] },
                ],
            ],
        ]
    }
}
