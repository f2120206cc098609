import CovenKit
import Foundation

/// `coven fsck`: prove the store is whole, a little every night, and mend what can be mended.
struct FsckCommand: Command {
    static let name = "fsck"
    static let abstract = "check that every stored byte can still be read, and mend what can be mended"
    static let synopsis = ["[--fast] [--repair] [--time-limit DURATION] [--days N] [--progress-json]"]
    static let discussion = """
    Checks the stored objects this device's file records name (every chunk authenticated and the \
    whole file's SHA-256 equal to its record's; with --fast only their presence and size, from \
    listings a page at a time), the change objects of every device (present with no gap up to \
    the newest, signed by their device, sealed for their path) and snapshots (readable, with \
    their object lists), and this device's own bytes: cache entries against their tags, coven's \
    copies and staged copies against their hashes, and people's originals against their \
    recorded size, modification time and hash (reported as changed or missing, never touched). \
    Objects in storage that nothing names are reported, not deleted (gc's job). Each \
    verification's time is kept on the device: --time-limit takes the objects verified longest \
    ago first and stops in time, so nightly runs cover everything in turn, and a run stopped or \
    killed loses nothing. --repair seals a damaged or missing stored object again from a local \
    source that matches its record's hash (the original, coven's copy, a complete cache entry) \
    and checks it again, and publishes this device's damaged or missing changes again. Prints \
    one line per problem, one per file whose bytes are gone for good with the rows naming it, \
    then a summary with the oldest verification and the share of bytes verified in the last \
    --days days (30); one JSON object with --json; --progress-json writes JSON lines of \
    progress on stderr. Exit status: 0 clean, 6 damage found, 11 damage found and all of it \
    mended, 5 storage unreachable, 130 interrupted (the next run goes on).
    """
    static let options = [
        OptionSpec("fast", help: "check presence and size only, from listings: no object is read"),
        OptionSpec("repair", help: "mend what can be mended from local sources; never touches an original"),
        OptionSpec("time-limit", value: "DURATION", help: "stop after DURATION (90s, 30m, 1h, 1h30m): least recently verified first"),
        OptionSpec("days", value: "N", help: "the window of the summary's share of bytes verified (default 30)"),
        OptionSpec("progress-json", help: "write progress as JSON lines on stderr"),
    ]
    static let mutates = true
    static let pollsStop = true

    /// The exit status of a run that found damage and mended all of it.
    static let mended: Int32 = 11

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        var options = FsckOptions()
        options.fast = invocation.has("fast")
        options.repair = invocation.has("repair")
        if let text = invocation.value("time-limit") { options.timeLimit = try parseDuration(text) }
        if let days = try invocation.integer("days") {
            guard days >= 1, days <= 36500 else {
                throw CovenError(.usage, "--days takes a number of days from 1 to 36500, not \(days)")
            }
            options.recentDays = Int(days)
        }
        let device = try context.openDevice()
        // A repair publishes changes again and stores objects: one at a time with sync.
        let lock = options.repair ? try device.lock(wait: !context.noWait) : nil
        defer { _ = lock }
        let json = invocation.has("progress-json")
        let status = StatusLine(context)
        var lastJSON = 0.0
        let fsck = Fsck(device: device, options: options, stop: Stop.process) { progress in
            let now = Date().timeIntervalSince1970
            if json {
                guard now - lastJSON >= 0.2 else { return }
                lastJSON = now
                let object: [String: Any] = ["phase": progress.phase, "objects": progress.objectsChecked,
                                             "bytes": progress.bytesChecked, "problems": progress.problems]
                if let line = try? JSONText.render(object) { context.err.write(line + "\n") }
                context.err.flush()
                return
            }
            guard status.isDue() else { return }
            status.show("fsck \(progress.phase): \(progress.objectsChecked) objects, \(ByteSize.format(progress.bytesChecked)), \(progress.problems) problems")
        }
        let report = try fsck.run()
        status.finish()
        let exit = report.damageFound ? (report.allMended ? mended : ExitCodes.integrity) : ExitCodes.success
        if context.json {
            try context.printJSON(object(report, exit: exit))
            return exit
        }
        for problem in report.problems {
            let line = "\(problem.mended ? "mended" : problem.kind.rawValue) \(problem.subject.rawValue) \(problem.key): \(problem.message)"
                + (problem.mendedFrom.map { " (from \($0))" } ?? "")
            context.line(line)
        }
        for lost in report.lost {
            context.line("lost file \(lost.file) (\(lost.object)): " + (lost.rows.isEmpty ? "no row names it" : "named by " + lost.rows.joined(separator: ", ")))
        }
        for key in report.unnamed { context.report("unnamed \(key): nothing this device knows names it (gc deletes what it can prove unused)") }
        var summary = report.fast
            ? "found \(report.objectsChecked.counted("stored object")) present at the size of their record (\(ByteSize.format(report.bytesChecked)))"
            : "verified \(report.objectsChecked.counted("object")) (\(ByteSize.format(report.bytesChecked))), \(report.changesChecked.counted("change")), \(report.snapshotsChecked.counted("snapshot")), \(report.localChecked.counted("local file"))"
        let mendedCount = report.problems.filter(\.mended).count
        summary += report.problems.isEmpty ? "; no problems" : "; \(report.problems.count.counted("problem")), \(mendedCount) mended"
        if !report.complete { summary += "; stopped at the time limit, \(report.remaining) left for the next run" }
        context.report(summary)
        let oldest = report.oldestVerified.map { "oldest verification \(Timestamp.iso8601($0))" }
            ?? (report.neverVerified > 0 ? "\(report.neverVerified.counted("object")) never verified" : "nothing stored")
        context.report("\(oldest); \(percent(report.recentShare)) of stored bytes verified in the last \(report.recentDays.counted("day"))")
        return exit
    }

    static func percent(_ share: Double) -> String {
        let value = share * 100
        return value == value.rounded() ? "\(Int(value))%" : String(format: "%.1f%%", value)
    }

    static func object(_ report: FsckReport, exit: Int32) -> [String: Any] {
        var object: [String: Any] = [
            "fast": report.fast,
            "objects_checked": report.objectsChecked,
            "bytes_checked": report.bytesChecked,
            "changes_checked": report.changesChecked,
            "snapshots_checked": report.snapshotsChecked,
            "local_checked": report.localChecked,
            "listings": report.listings,
            "problems": report.problems.map { problem -> [String: Any] in
                var item: [String: Any] = ["subject": problem.subject.rawValue, "kind": problem.kind.rawValue, "key": problem.key,
                                           "message": problem.message, "files": problem.files, "mended": problem.mended]
                if let from = problem.mendedFrom { item["mended_from"] = from }
                return item
            },
            "lost": report.lost.map { ["file": $0.file, "object": $0.object, "rows": $0.rows] as [String: Any] },
            "unnamed": report.unnamed,
            "complete": report.complete,
            "remaining": report.remaining,
            "stored_objects": report.storedObjects,
            "stored_bytes": report.storedBytes,
            "never_verified": report.neverVerified,
            "oldest_verified": report.oldestVerified.map { Timestamp.iso8601($0) as Any } ?? NSNull(),
            "recent_days": report.recentDays,
            "recent_share": report.recentShare,
            "exit_code": exit,
        ]
        object["damage_found"] = report.damageFound
        return object
    }

    /// Parses `90`, `90s`, `30m`, `1h`, `1h30m`, `2d` into seconds.
    ///
    /// - Throws: `.usage` for anything else, or no time at all.
    static func parseDuration(_ text: String) throws -> Double {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var total = 0.0
        var digits = ""
        var sawUnit = false
        for character in text {
            if character.isASCII, character.isNumber {
                digits.append(character)
            } else if let unit = units[character], let value = Double(digits) {
                total += value * unit
                digits = ""
                sawUnit = true
            } else {
                throw CovenError(.usage, "'\(text)' is not a duration", hint: "write it as 90s, 30m, 1h or 1h30m")
            }
        }
        if !digits.isEmpty {
            guard !sawUnit, let value = Double(digits) else {
                throw CovenError(.usage, "'\(text)' is not a duration", hint: "write it as 90s, 30m, 1h or 1h30m")
            }
            total += value
        }
        guard total > 0 else {
            throw CovenError(.usage, "--time-limit takes a duration longer than zero, not '\(text)'", hint: "write it as 90s, 30m, 1h or 1h30m")
        }
        return total
    }
}
