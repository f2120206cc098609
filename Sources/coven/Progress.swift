import CovenKit
import Foundation

/// A one-line progress bar on stderr, drawn only when stderr is a terminal (and not under
/// `--quiet` or `--json`), through a ``StatusLine``.
final class ProgressLine {
    private let label: String
    private let total: Int64?
    private let status: StatusLine

    init(_ context: CommandContext, label: String, total: Int64?) {
        self.label = label
        self.total = total
        self.status = StatusLine(context)
    }

    func update(_ done: Int64) {
        guard status.isDue() else { return }
        var text = "\(label) \(ByteSize.format(done))"
        if let total, total > 0 {
            let percent = min(100, Int(Double(done) * 100 / Double(total)))
            text += " / \(ByteSize.format(total)) \(percent)%"
        }
        status.show(text)
    }

    func finish() { status.finish() }
}

/// The one line of progress a command shows on stderr while it works.
///
/// On a terminal that can move the cursor the line is redrawn in place (`\r`, then the text,
/// then erase-to-end-of-line), at most ten times a second, and erased at the end. Under
/// `TERM=dumb`, or with no `TERM` at all (an Emacs shell buffer, a serial console, a `script`
/// log), nothing but plain text is written: one whole line at most every five seconds, never a
/// cursor escape. Nothing at all when stderr is not a terminal or under `--quiet`/`--json`.
final class StatusLine {
    private let context: CommandContext
    private let redraws: Bool
    private var lastDraw = 0.0
    private var drawn = false

    init(_ context: CommandContext) {
        self.context = context
        self.redraws = context.terminalMovesCursor
    }

    /// Whether a line shown now would be drawn: progress is on and the last one is old enough
    /// (`final`, for the last step of a job, skips the wait where the line is redrawn in place).
    func isDue(final: Bool = false) -> Bool {
        guard context.showsProgress else { return false }
        if final && redraws { return true }
        return Date().timeIntervalSince1970 - lastDraw >= (redraws ? 0.1 : 5)
    }

    /// Shows `text` (call ``isDue(final:)`` first).
    func show(_ text: String) {
        lastDraw = Date().timeIntervalSince1970
        if redraws {
            context.err.write("\r" + text + "\u{1B}[K")
            drawn = true
        } else {
            context.err.write(text + "\n")
        }
    }

    /// Erases a line drawn in place; plain lines stay.
    func finish() {
        guard drawn else { return }
        context.err.write("\r\u{1B}[K")
        drawn = false
    }
}

extension CommandContext {
    /// Whether stderr's terminal understands cursor movement: `TERM` is set, and not `dumb`.
    var terminalMovesCursor: Bool {
        let term = environment["TERM"] ?? ""
        return !term.isEmpty && term != "dumb"
    }

    /// Opens the device named by `--db` for reading and writing.
    func openDevice() throws -> Device {
        try Device.open(paths: DevicePaths(database: databasePath))
    }

    /// Opens the device read-only: never blocks on the device lock, never changes anything.
    func openDeviceReadOnly() throws -> Device {
        try Device.open(paths: DevicePaths(database: databasePath), readOnly: true)
    }
}
