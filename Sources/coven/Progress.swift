import CovenKit
import Foundation

/// A one-line progress bar on stderr, drawn only when stderr is a terminal (and not under
/// `--quiet` or `--json`), at most ten times a second.
final class ProgressLine {
    private let context: CommandContext
    private let label: String
    private let total: Int64?
    private var lastDraw = 0.0
    private var drawn = false

    init(_ context: CommandContext, label: String, total: Int64?) {
        self.context = context
        self.label = label
        self.total = total
    }

    func update(_ done: Int64) {
        guard context.showsProgress else { return }
        let now = Date().timeIntervalSince1970
        guard now - lastDraw >= 0.1 else { return }
        lastDraw = now
        var text = "\r\(label) \(ByteSize.format(done))"
        if let total, total > 0 {
            let percent = min(100, Int(Double(done) * 100 / Double(total)))
            text += " / \(ByteSize.format(total)) \(percent)%"
        }
        context.err.write(text + "\u{1B}[K")
        drawn = true
    }

    func finish() {
        guard drawn else { return }
        context.err.write("\r\u{1B}[K")
        drawn = false
    }
}

extension CommandContext {
    /// Opens the device named by `--db` for reading and writing.
    func openDevice() throws -> Device {
        try Device.open(paths: DevicePaths(database: databasePath))
    }

    /// Opens the device read-only: never blocks on the device lock, never changes anything.
    func openDeviceReadOnly() throws -> Device {
        try Device.open(paths: DevicePaths(database: databasePath), readOnly: true)
    }
}
