import CovenKit
import Foundation

/// `coven sync`: publish this device's writes and apply the other devices'.
struct SyncCommand: Command {
    static let name = "sync"
    static let abstract = "publish this device's writes and apply the other devices'"
    static let synopsis = ["[--push | --pull]"]
    static let discussion = """
    Pushes, pulls, then pushes again (what the pull changed locally, nothing; what was written \
    meanwhile, everything). A push publishes the recorded writes oldest first as sealed, signed \
    change objects under changes/<device>/, stopping before the first write a bound upload still \
    holds; a pull applies every other device's new changes in causal order, last writer wins per \
    row, keeping the losing side of a concurrent edit as a lost value ('coven lost'). Of a \
    device gone for good, only the changes some device's published frontier says it applied \
    are pulled, so every device ends with the same rows. A quiet sync lists devices/ once, \
    lists each live device's changes after the one applied, and this device's own after the \
    one it published. A missing or damaged change, a database put back from a backup, a lost \
    device key and a device whose clock runs far ahead are each noticed and said (see the \
    docs). Prints a summary, the app's rows counted apart from coven's own file records \
    ('pushed 1 change (2 rows, 2 file records)'; nothing under -q but warnings), or one JSON \
    object with --json.
    """
    static let options = [
        OptionSpec("push", help: "only publish this device's writes"),
        OptionSpec("pull", help: "only apply the other devices' changes"),
    ]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let pushOnly = invocation.has("push"), pullOnly = invocation.has("pull")
        guard !(pushOnly && pullOnly) else { throw CovenError(.usage, "--push and --pull exclude each other", hint: "give neither to do both") }
        let device = try context.openDevice()
        let line = StatusLine(context)
        var published = 0, applied = 0
        let report = try StoreSync(device).sync(push: !pullOnly, pull: !pushOnly, wait: !context.noWait, stop: Stop.process) { step in
            switch step {
            case .published: published += 1
            case .applied: applied += 1
            }
            if line.isDue() { line.show("sync: \(published.counted("change")) published, \(applied.counted("change")) applied") }
        }
        line.finish()
        let pulled = report.pulled
        let status = SyncProblemsText.incomplete(report) ? ExitCodes.partial : ExitCodes.success
        let problems = SyncProblemsText(device: device, context: context)
        if context.json {
            try context.printJSON([
                "quiet": report.quiet,
                "pushed": (["changes": report.pushed.published, "entries": report.pushed.entries,
                            "rows": report.pushed.rows, "file_records": report.pushed.fileRecords,
                            "held": report.pushed.held] as [String: Any])
                    .merging(SyncProblemsText.pushedJSON(report.pushed)) { first, _ in first },
                "pulled": ([
                    "changes": pulled.changes, "entries": pulled.entries, "rows": pulled.rows,
                    "file_records": pulled.fileRecords, "skipped": pulled.skipped, "lost": pulled.lost, "refused": pulled.refused,
                    "taken_out": pulled.takenOut, "devices": pulled.applied, "waiting": pulled.waiting,
                    "new_devices": pulled.newDevices,
                ] as [String: Any]).merging(SyncProblemsText.pulledJSON(pulled)) { first, _ in first },
                "mass_deletes": pulled.massDeletes.map(SyncProblemsText.json),
                "exit_code": status,
            ])
            problems.write(report)
        } else {
            if report.quiet {
                // Nothing moved: a stream waiting for a key is not "nothing to do" (changes are
                // there, unread), nor is one stopped at damage (exit 10).
                let waits = pulled.keyUnavailable.count
                let quiet = waits > 0 ? "nothing applied: the changes of \(waits.counted("device")) wait for a key generation this device has not read yet"
                    : status == ExitCodes.success ? "nothing to do" : "nothing published or applied"
                context.report(quiet
                               + (report.pushed.held > 0 ? " (\(report.pushed.held.counted("write")) held by bound uploads)" : ""))
            } else {
                var parts: [String] = []
                // The app's rows, then coven's own file records when there are any.
                func entries(_ rows: Int, files: Int) -> String {
                    rows.counted("row") + (files > 0 ? ", \(files.counted("file record"))" : "")
                }
                if !pullOnly {
                    parts.append("pushed \(report.pushed.published.count.counted("change")) (\(entries(report.pushed.rows, files: report.pushed.fileRecords)))")
                }
                if !pushOnly {
                    var pull = "pulled \(pulled.changes.counted("change")) (\(entries(pulled.rows, files: pulled.fileRecords))"
                    if pulled.lost > 0 { pull += ", \(pulled.lost.counted("lost value"))" }
                    // Entries their writers were not allowed to write: kept as lost values too.
                    if pulled.refused > 0 { pull += ", \(pulled.refused.counted("entry", plural: "entries")) refused ('coven lost' lists why)" }
                    if pulled.takenOut > 0 { pull += ", \(pulled.takenOut.counted("row")) taken out" }
                    parts.append(pull + ")")
                }
                if report.pushed.held > 0 { parts.append("\(report.pushed.held.counted("write")) held by bound uploads") }
                context.report(parts.joined(separator: "; "))
            }
            problems.write(report)
        }
        return status
    }

}
