import CovenKit
import Foundation

/// `coven make-device-only`: bring files back into a folder, then switch them to this device only.
struct MakeDeviceOnlyCommand: Command {
    static let name = "make-device-only"
    static let abstract = "bring files back into a folder, then switch them to this device only"
    static let synopsis = [
        "--folder DIR FILE=REL/PATH...",
        "--folder DIR [--input-json] < LIST",
    ]
    static let discussion = """
    Downloads each stored file into the folder DIR, at its path under it, checking its content \
    hash, then switches every file to this device only in one write, with each copy listed in \
    coven_user_files as the file's original here. Other devices see the files on this device \
    when the write reaches them. Prints each file's id and its copy's path, tab-separated, one \
    a line.

    Each file comes with its path: as an argument FILE=REL/PATH, where / separates names; or, \
    with no FILE argument, as lines on stdin, FILE<TAB>NAME<TAB>NAME..., each field one name, \
    outermost first, so a name may hold a / (the band AC/DC); or, with --input-json, as JSON \
    lines {"file": FILE, "path": ["AC/DC", "Back in Black.flac"]}.

    Each name is written through one rule, the same on every platform, so it is valid on any \
    drive: " * : < > ? \\ | / become their fullwidth forms, control characters become \
    U+2400 to U+241F and DEL U+2421, a last dot becomes U+FF0E and a last space U+2420, a \
    Windows device name (CON, PRN, AUX, NUL, COM1 to COM9, LPT1 to LPT9, any case, with or \
    without an extension) has its first character made fullwidth, and a name past 255 bytes \
    keeps its extension and is cut before it, ending in an ellipsis. So the one name AC/DC \
    becomes a folder whose slash is U+FF0F, the fullwidth solidus.

    Refused before any byte downloads, each error naming its input: an empty path or name \
    (empty), a folder path that is not valid Unicode (not_unicode), a path through a symbolic \
    link below the folder (link), something already at a path (exists: coven never replaces a \
    file), two paths that are one after the rule, case folding or Unicode normalization \
    (clash, naming both paths as given), a file on one device only (not_in_cloud), an app file \
    (namespace_kind), a file this device has no record of (file_absent).

    Each file is written under a temporary name in its final folder, synced, and given its \
    final name once whole. Until the switch commits, a failure, Ctrl-C, a TERM signal or a \
    kill removes every copy and folder the call made; a folder that was there, or that someone \
    made meanwhile, stays. After a crash or a kill the next command that opens the device \
    cleans up. On a terminal a progress line shows the current file and the whole call; \
    --progress-json writes JSON lines of progress on stderr for scripts.
    """
    static let options = [
        OptionSpec("folder", value: "DIR", help: "the folder the copies go under (it must exist)", completion: .directory),
        OptionSpec("input-json", help: "read stdin as JSON lines {\"file\": FILE, \"path\": [NAME, ...]}"),
        OptionSpec("progress-json", help: "write progress as JSON lines on stderr"),
        OptionSpec("parallel", value: "N", help: "how many files download at once (default 8)"),
    ]
    static let arguments = [ArgumentSpec("FILE=REL/PATH", help: "a stored file and its path under the folder", optional: true, repeating: true, completion: .fileID)]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let folder = invocation.value("folder") else { throw CovenError(.usage, "missing --folder DIR") }
        let parallel = try invocation.integer("parallel") ?? 8
        guard parallel >= 1 && parallel <= 64 else { throw CovenError(.usage, "--parallel takes 1 to 64, not \(parallel)") }
        var requests: [DeviceOnlyRequest] = []
        if invocation.arguments.isEmpty {
            guard !context.stdinIsTerminal else {
                throw CovenError(.usage, "missing FILE=REL/PATH", hint: "give files as arguments, or lines on stdin")
            }
            let json = invocation.has("input-json")
            // Bytes, not text: a name's bytes that are not UTF-8 are kept (and written as \\xNN).
            let input = [UInt8](FileHandle.standardInput.readDataToEndOfFile())
            for (index, raw) in input.split(separator: 10, omittingEmptySubsequences: false).enumerated() {
                let number = index + 1
                var bytes = Array(raw)
                if bytes.last == 13 { bytes.removeLast() }
                let text = PathText.string(fromOSBytes: bytes)
                if text.trimmingCharacters(in: .whitespaces).isEmpty { continue }
                requests.append(json ? try DeviceOnlyRequest.jsonLine(text, number: number) : try DeviceOnlyRequest.tabLine(text, number: number))
            }
            guard !requests.isEmpty else { throw CovenError(.usage, "stdin holds no file") }
        } else {
            guard !invocation.has("input-json") else {
                throw CovenError(.usage, "--input-json reads stdin: give no FILE=REL/PATH argument with it")
            }
            for (index, argument) in invocation.arguments.enumerated() {
                requests.append(try DeviceOnlyRequest.argument(argument, position: index + 1))
            }
        }

        let device = try context.openDevice()
        let printer = DeviceOnlyProgressPrinter(context, json: invocation.has("progress-json"))
        let copies: [DeviceOnlyCopy]
        do {
            copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: requests, parallel: Int(parallel), stop: Stop.process, progress: printer.show)
        } catch {
            printer.finish()
            throw error
        }
        printer.finish()
        if context.json {
            try context.printJSON(["files": copies.map { ["file": $0.file, "path": PathText.display($0.path), "relative_path": $0.relativePath, "size": $0.size] as [String: Any] }])
        } else {
            for copy in copies { context.line(copy.file + "\t" + PathText.display(copy.path)) }
        }
        return 0
    }
}

/// Draws make-device-only's progress: one line on a terminal (the current file's bar and the
/// call's), or JSON lines with --progress-json. Calls come one at a time from download threads.
final class DeviceOnlyProgressPrinter: @unchecked Sendable {
    // @unchecked: CovenKit calls `show` under its own lock, one call at a time.
    private let context: CommandContext
    private let json: Bool
    private let status: StatusLine
    private var lastJSON: [String: Double] = [:]

    init(_ context: CommandContext, json: Bool) {
        self.context = context
        self.json = json
        self.status = StatusLine(context)
    }

    var show: @Sendable (DeviceOnlyProgress) -> Void {
        { [self] progress in self.draw(progress) }
    }

    private func draw(_ progress: DeviceOnlyProgress) {
        let now = Date().timeIntervalSince1970
        if json {
            guard progress.done || now - (lastJSON[progress.file] ?? 0) >= 0.2 else { return }
            lastJSON[progress.file] = progress.done ? nil : now
            let object: [String: Any] = [
                "file": progress.file, "path": progress.path, "bytes": progress.bytes, "size": progress.size,
                "done": progress.done, "call_bytes": progress.callBytes, "call_size": progress.callSize,
                "files_done": progress.filesDone, "files": progress.fileCount,
            ]
            if let line = try? JSONText.render(object) { context.err.write(line + "\n") }
            return
        }
        guard status.isDue(final: progress.filesDone == progress.fileCount) else { return }
        func percent(_ done: Int64, _ total: Int64) -> Int { total > 0 ? min(100, Int(Double(done) * 100 / Double(total))) : 100 }
        let name = progress.path.count > 30 ? "…" + progress.path.suffix(29) : progress.path
        let text = "[\(progress.filesDone)/\(progress.fileCount)] \(name) \(percent(progress.bytes, progress.size))%"
            + " | all \(ByteSize.format(progress.callBytes)) / \(ByteSize.format(progress.callSize)) \(percent(progress.callBytes, progress.callSize))%"
        status.show(text)
    }

    func finish() { status.finish() }
}
