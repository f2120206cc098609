import CovenKit
import Foundation

/// Dispatch: find the command, parse its words, run it, and turn any error into one line (or one
/// JSON object) on stderr and its documented exit status.
enum CLI {
    static let version = "0.1.0"

    static func main(_ words: [String], environment: [String: String]) -> Int32 {
        let out = OutputStream(descriptor: 1)
        let err = OutputStream(descriptor: 2, bufferSize: 0)
        defer { out.flush(); err.flush() }
        let wantsJSON = words.contains("--json")
        guard let first = words.first else {
            err.write(Help.overview())
            return ExitCodes.usage
        }
        if first == "--help" || first == "-h" || first == "help" {
            if first == "help", words.count > 1, let command = CommandRegistry.find(words[1]) {
                out.write(Help.render(command))
            } else {
                out.write(Help.overview())
            }
            return ExitCodes.success
        }
        if first == "--version" {
            out.write("coven \(version)\n")
            return ExitCodes.success
        }
        guard let command = CommandRegistry.find(first) else {
            report(CovenError(.usage, "'\(first)' is not a coven command", hint: "see 'coven --help'"), json: wantsJSON, err: err)
            return ExitCodes.usage
        }
        do {
            let invocation = try Parser.parse(Array(words.dropFirst()), options: command.options, arguments: command.arguments, command: command.name)
            if invocation.has("help") {
                out.write(Help.render(command))
                return ExitCodes.success
            }
            let context = CommandContext(
                databasePath: DevicePaths.databasePath(option: invocation.value("db"), environment: environment),
                json: invocation.has("json"), quiet: invocation.has("quiet"), noWait: invocation.has("no-wait"),
                environment: environment, out: out, err: err)
            let status = try command.run(invocation, context)
            return status
        } catch {
            out.flush()
            let error = error.asCovenError
            report(error, json: wantsJSON, err: err)
            return ExitCodes.code(for: error.code)
        }
    }

    /// Writes an error as `coven: error: …` (+ `coven: hint: …`), or one JSON object.
    static func report(_ error: CovenError, json: Bool, err: OutputStream) {
        if json {
            var object: [String: Any] = ["error": error.code.rawValue, "message": error.message]
            if let cause = error.cause { object["cause"] = cause }
            if let hint = error.hint { object["hint"] = hint }
            for (key, value) in error.details where object[key] == nil { object[key] = value }
            object["exit_code"] = Int(ExitCodes.code(for: error.code))
            err.write(((try? JSONText.render(object)) ?? "{\"error\":\"internal\"}") + "\n")
            return
        }
        var line = "coven: error: \(error.code.rawValue): \(error.message)"
        if let cause = error.cause { line += ": \(cause)" }
        err.write(line + "\n")
        if let hint = error.hint { err.write("coven: hint: \(hint)\n") }
    }
}
