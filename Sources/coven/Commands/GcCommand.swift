import CovenKit
import Foundation

/// `coven gc`: delete the stored objects nothing can still point at.
struct GcCommand: Command {
    static let name = "gc"
    static let abstract = "delete the stored objects nothing can still point at"
    static let synopsis = ["[--dry-run] [--gone-devices] [-z]"]
    static let discussion = """
    Syncs first (with --dry-run it only pulls), then deletes each stored file object a record of \
    which was deleted or switched to device-only (by this device, or by another one, live or \
    gone for good, whose change this device applied), whose move was cancelled or whose upload \
    was retired, once nothing can still point at it: no record, lost value, retained snapshot, \
    queued write or upload names it, each write that ended a record naming it is published, and \
    every other device not gone for good has published a frontier that includes each of those \
    writes ('coven sync' on a device that holds it back is enough). It also deletes change objects \
    every device not gone for good has applied and the newest retained snapshot covers (none \
    while there is no snapshot), and snapshots past the newest two. Once a day it also removes \
    what interrupted uploads of this device left: temporary files (file://) and unfinished \
    uploads no queued upload names, each older than a day. A quiet pass lists no files. \
    Prints one line per object deleted (as soon as storage confirmed it), already gone or kept back, with why and the devices holding it, then a \
    summary (under -q only the deletes refused or failed); one JSON object with --json. With -z, five fields an object, each ended by NUL, and no summary: deleted, already_gone, would_delete, aborted, would_abort or kept; the key; the reason and the devices (ids, comma-separated) it is kept for; the detail. A user's original is never deleted: only objects \
    under files/, changes/ and snapshots/ in storage.
    """
    static let options = [
        OptionSpec("dry-run", help: "delete nothing; print what would be deleted and kept"),
        OptionSpec("gone-devices", help: "also end the unfinished uploads of devices gone for good and delete what no record names in their folders"),
        CommandContext.nulTerminatedOption,
    ]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        let zero = invocation.has("null-terminated")
        // Each delete is printed once storage confirmed it, so a run killed later leaves a
        // record of what went (--json prints everything at the end).
        var printFailure: Error?
        let report = try GarbageCollection(device).collectGarbage(dryRun: invocation.has("dry-run"), goneDevices: invocation.has("gone-devices"),
                                               wait: !context.noWait, stop: Stop.process) { deleted, gone in
            guard !context.json, printFailure == nil else { return }
            do {
                if zero {
                    try context.record([gone ? "already_gone" : "deleted", deleted.key, "", "", ""], nulTerminated: true)
                } else {
                    context.report("\(gone ? "already gone" : "deleted") \(deleted.key)")
                }
                context.out.flush()
            } catch {
                printFailure = error
            }
        }
        if let printFailure { throw printFailure }
        let status = report.hasFailures ? ExitCodes.partial : ExitCodes.success
        if context.json {
            try context.printJSON([
                "dry_run": report.dryRun,
                "deleted": report.deleted.map { ["key": $0.key, "kind": $0.kind.rawValue] },
                "already_gone": report.alreadyGone.map { ["key": $0.key, "kind": $0.kind.rawValue] },
                "kept": report.kept.map { kept -> [String: Any] in
                    var object: [String: Any] = ["key": kept.key, "kind": kept.kind.rawValue, "reason": kept.reason.rawValue, "devices": kept.devices]
                    if let detail = kept.detail { object["detail"] = detail }
                    return object
                },
                "aborted_uploads": report.abortedUploads,
                "pulled": report.pulled,
                "exit_code": status,
            ])
            return status
        }
        if invocation.has("null-terminated") {
            // Five fields an object: what was done, the key (the upload's for an abort), the
            // reason and the devices (comma-separated ids) it was kept for, the detail.
            if report.dryRun { for deleted in report.deleted { try context.record(["would_delete", deleted.key, "", "", ""], nulTerminated: true) } }
            for aborted in report.abortedUploads { try context.record([report.dryRun ? "would_abort" : "aborted", aborted, "", "", ""], nulTerminated: true) }
            for kept in report.kept {
                try context.record(["kept", kept.key, kept.reason.rawValue, kept.devices.joined(separator: ","), kept.detail ?? ""], nulTerminated: true)
            }
            return status
        }
        let verb = report.dryRun ? "would delete" : "deleted"
        if report.dryRun { for deleted in report.deleted { context.report("\(verb) \(deleted.key)") } }
        for aborted in report.abortedUploads { context.report("\(report.dryRun ? "would abort" : "aborted") the upload of \(aborted)") }
        // People read devices by name where it is unique ('coven devices' lists both); --json
        // keeps the ids.
        let known = try StoreSync(device).devices()
        var names: [String: String] = [:]
        for entry in known where !entry.name.isEmpty && known.filter({ $0.name == entry.name }).count == 1 { names[entry.id] = DeviceNameText.escape(entry.name) }
        func named(_ text: String) -> String {
            names.reduce(text) { $0.replacingOccurrences(of: $1.key, with: $1.value) }
        }
        for kept in report.kept {
            var line = "kept \(kept.key): \(kept.reason.rawValue.replacingOccurrences(of: "_", with: " "))"
            if !kept.devices.isEmpty { line += " (\(kept.devices.map { names[$0] ?? $0 }.joined(separator: ", ")))" }
            // (A detail that is a storage key, as a snapshot's, stays as it is.)
            if let detail = kept.detail { line += ": " + (kept.reason == .deviceBehind ? named(detail) : detail) }
            // A delete refused or failed is printed under -q too: it is why the status is 10.
            if kept.reason == .refused || kept.reason == .failed { context.line(line) } else { context.report(line) }
        }
        var summary = "\(verb) \(report.deleted.count.counted("object"))"
        if !report.alreadyGone.isEmpty { summary += ", \(report.alreadyGone.count) already gone" }
        summary += ", kept \(report.kept.count)"
        if report.deleted.isEmpty && report.alreadyGone.isEmpty && report.kept.isEmpty && report.abortedUploads.isEmpty { summary = "nothing to delete" }
        context.report(summary)
        return status
    }
}
