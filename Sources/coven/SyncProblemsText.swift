import CovenKit
import Foundation

/// What `coven sync` and `coven join` say of damage a sync met (a gap, a damaged change, a
/// change lost for good with its device, a restored database, a change published again):
/// warnings on stderr that `--quiet` does not silence (they come with exit 10 or name data
/// that is gone), and the JSON members both print.
struct SyncProblemsText {
    let device: Device
    let context: CommandContext
    private var names: [String: String] = [:]

    init(device: Device, context: CommandContext) {
        self.device = device
        self.context = context
        for info in (try? StoreSync(device).devices()) ?? [] { names[info.id] = info.name }
    }

    /// `name (id)`, or the id alone for a device this one has no name for.
    func describe(_ id: String) -> String {
        guard let name = names[id], !name.isEmpty else { return id }
        return "'\(DeviceNameText.escape(name))' (\(id))"
    }

    /// Whether the report holds something that stops a device's stream here (exit 10).
    static func incomplete(_ report: SyncReport) -> Bool {
        !report.pulled.gaps.isEmpty || !report.pulled.waiting.isEmpty || !report.pulled.damaged.isEmpty || !report.pushed.unrecoverable.isEmpty
    }

    /// The JSON members of a pull's problems.
    static func pulledJSON(_ pulled: PullReport) -> [String: Any] {
        [
            "clock_ahead_ms": pulled.clockAhead,
            "gaps": pulled.gaps,
            "key_unavailable": pulled.keyUnavailable,
            "reopened_sections": pulled.reopenedSections,
            "reopened_parts": pulled.reopenedParts,
            "reopen_unavailable": pulled.reopenUnavailable,
            "refused_removals": pulled.refusedRemovals,
            "damaged": pulled.damaged.mapValues { ["seq": $0.seq, "object": $0.object, "message": $0.message] as [String: Any] },
            "lost_for_good": pulled.lostForGood.map { ["device": $0.device, "seq": $0.seq, "object": $0.object, "why": $0.why.rawValue] as [String: Any] },
        ]
    }

    /// A mass delete for people: who, how many rows of which tables, and the command that
    /// undoes it (`device` as ``describe(_:)`` names it).
    static func describe(_ mass: MassDelete, device: String) -> String {
        let rows = mass.tables.reduce(0) { $0 + $1.rows }
        return "device \(device)\(mass.member.map { " of member \($0)" } ?? "") deleted \(rows.counted("row")) in change \(mass.device):\(mass.seq) ("
            + mass.tables.map { "\($0.table): \($0.rows)" }.joined(separator: ", ") + "), applied here; '\(mass.undo)' brings them back"
    }

    /// A mass delete as `sync --json`'s `mass_deletes` and `status --json` give it.
    static func json(_ mass: MassDelete) -> [String: Any] {
        ["device": mass.device, "name": mass.deviceName.map { $0 as Any } ?? NSNull(), "member": mass.member.map { $0 as Any } ?? NSNull(),
         "seq": mass.seq, "change": "\(mass.device):\(mass.seq)", "rows": mass.tables.reduce(0) { $0 + $1.rows },
         "tables": mass.tables.map { ["table": $0.table, "rows": $0.rows] as [String: Any] }, "undo": mass.undo, "applied_at": mass.appliedAt]
    }

    /// The JSON members of a push's recoveries.
    static func pushedJSON(_ pushed: PushReport) -> [String: Any] {
        ["caught_up": pushed.caughtUp, "republished": pushed.republished, "unrecoverable": pushed.unrecoverable]
    }

    /// Writes the warnings and notes for people.
    func write(_ report: SyncReport) {
        let pushed = report.pushed, pulled = report.pulled
        if let first = pushed.caughtUp.first, let last = pushed.caughtUp.last {
            warn("this device's database was older than what it published (restored from a backup, or copied): "
                 + "applied its own \(first == last ? "change \(first)" : "changes \(first)–\(last)") from storage before publishing anything new; "
                 + "what it wrote after that backup and never published is gone")
        }
        for seq in pushed.republished {
            note("published change \(seq) of this device again: another device reported it missing from storage or damaged")
        }
        for seq in pushed.unrecoverable {
            warn("change \(seq) of this device is damaged in storage and this device no longer holds what it published in it: the others stop there; "
                 + "remove this device on another one ('coven device remove \(device.deviceID)') so they go past it, then make a new device with 'coven join'")
        }
        for (other, seq) in pulled.gaps.sorted(by: { $0.key < $1.key }) {
            warn("change \(seq) of device \(describe(other)) is missing from storage ('\(ChangeObject.path(device: other, seq: UInt64(seq)))') though later changes say it was published: "
                 + "reported to that device, which publishes it again at its next sync; its changes stop here until then; "
                 + "if that device can publish it no more, 'coven device remove \(other)' lets the others go past it")
        }
        for (other, change) in pulled.damaged.sorted(by: { $0.key < $1.key }) {
            warn("change \(change.seq) of device \(describe(other)) fails its checks (\(change.message)): reported to that device, which publishes it again at its next sync; "
                 + "its changes stop here until then; if that device is lost, 'coven device remove \(other)' lets the others go past it")
        }
        for lost in pulled.lostForGood {
            warn("change \(lost.seq) of device \(describe(lost.device)), gone for good, is \(lost.why == .missing ? "missing from" : "damaged in") storage: "
                 + "what it held is lost for good here; the others went past it")
        }
        for (other, ahead) in pulled.clockAhead.sorted(by: { $0.key < $1.key }) {
            warn("device \(describe(other)) stamps its changes \(ClockText.duration(ahead)) ahead of this device's clock: its stamps do not move this device's clock "
                 + "past \(ClockText.duration(HybridClock.maximumAhead)) ahead (an edit of a row it wrote is still stamped after it); check that device's clock")
        }
        for (other, seq) in pulled.keyUnavailable.sorted(by: { $0.key < $1.key }) {
            warn("change \(seq) of device \(describe(other)) is sealed under a key generation (of the store, or of a circle of this device's member) this device has not read yet: its changes wait here; "
                 + "a device of a member reads new generations at each sync (a device that belongs to no member takes its member's identity with 'coven member use FILE')")
        }
        for (path, why) in pulled.reopenUnavailable.sorted(by: { $0.key < $1.key }) {
            warn("change '\(path)' holds a circle's section this device can open now, but cannot be read again (\(why)): the circle's rows it held are not here")
        }
        for (other, why) in pulled.refusedRemovals.sorted(by: { $0.key < $1.key }) {
            warn("device \(describe(other)) stays in the store: \(why) (only an admin's device, or a device of its own member, removes a member's device)")
        }
        for mass in pulled.massDeletes {
            warn(Self.describe(mass, device: describe(mass.device)))
        }
        for (other, seq) in pulled.waiting.sorted(by: { $0.key < $1.key }) {
            note("warning: device \(describe(other))'s next change waits for change \(seq) of a device not applied here yet")
        }
        if Self.incomplete(report) { writePartial(report) }
    }

    /// The last line of a run that stopped part way (exit 10), as a batch's: `coven: error:
    /// partial: …` on stderr (one JSON object under `--json`), saying what stopped and that the
    /// rest is done.
    private func writePartial(_ report: SyncReport) {
        let pulled = report.pulled
        let stopped = Set(pulled.gaps.keys).union(pulled.damaged.keys).union(pulled.waiting.keys).count
        var parts: [String] = []
        if stopped > 0 { parts.append("the changes of \(stopped.counted("device")) stopped at a missing, damaged or waiting change") }
        if !report.pushed.unrecoverable.isEmpty {
            parts.append("\(report.pushed.unrecoverable.count.counted("change")) of this device cannot be published again")
        }
        let message = parts.joined(separator: "; ") + "; the rest is applied"
        if context.json {
            let object: [String: Any] = ["error": ErrorCode.partial.rawValue, "message": message, "exit_code": Int(ExitCodes.partial)]
            context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"partial\"}") + "\n")
        } else {
            context.err.write("coven: error: partial: \(message)\n")
        }
    }

    /// A warning on stderr, printed under `--quiet` too; under `--json` one object,
    /// `{"warning": TEXT}`, a line.
    private func warn(_ text: String) {
        if context.json {
            context.err.write(((try? JSONText.render(["warning": text])) ?? "{\"warning\":\"\"}") + "\n")
        } else {
            context.err.write("coven: warning: " + text + "\n")
        }
    }

    /// A note for people on stderr, not under `--quiet`; under `--json` one object,
    /// `{"note": TEXT}`, a line.
    private func note(_ text: String) {
        guard context.json else { return context.note(text) }
        guard !context.quiet else { return }
        context.err.write(((try? JSONText.render(["note": text])) ?? "{\"note\":\"\"}") + "\n")
    }
}

/// A duration for people: the largest unit that fits (`10 years`, `3 hours`, `42 seconds`).
enum ClockText {
    static func duration(_ milliseconds: Int64) -> String {
        let seconds = milliseconds / 1000
        let units: [(Int64, String)] = [(365 * 86400, "year"), (86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")]
        for (size, name) in units where seconds >= size {
            return (Int(seconds / size)).counted(name)
        }
        return "\(milliseconds) ms"
    }
}
