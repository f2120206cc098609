import CovenKit
import Foundation

/// Dispatch: find the command, parse its words, run it, and turn any error into one line (or one
/// JSON object) on stderr and its documented exit status.
///
/// The words are `[GLOBAL OPTIONS] COMMAND [OPTIONS AND ARGUMENTS]`; global options may also come
/// after the command word. `coven help [COMMAND]`, `coven --help` and `coven --version` are
/// handled here, before any command runs.
enum CLI {
    static let version = "0.1.0"

    /// - Parameter stdoutClosed: stdout was closed when the process started (`>&-`): every
    ///   write to it fails, and a command that prints fails with `io`.
    static func main(_ words: [String], environment: [String: String], stdoutClosed: Bool = false) -> Int32 {
        let out = OutputStream(descriptor: 1, closed: stdoutClosed)
        let err = OutputStream(descriptor: 2, bufferSize: 0)
        defer { out.flush(); err.flush() }
        // Decided before parsing, so that a usage error is reported as JSON too.
        let wantsJSON = words.prefix { $0 != "--" }.contains("--json")
        guard !words.isEmpty else {
            err.write(Help.overview())
            return ExitCodes.usage
        }
        do {
            let status = try dispatch(words, environment: environment, out: out, err: err)
            // Data that did not reach stdout is a failure, whatever the command did.
            try out.flushChecked()
            return status
        } catch {
            out.flush()
            let error = error.asCovenError
            report(error, json: wantsJSON, err: err)
            return ExitCodes.code(for: error.code)
        }
    }

    /// Finds the command and runs it; every failure is thrown for ``main(_:environment:)``.
    private static func dispatch(_ words: [String], environment: [String: String], out: OutputStream, err: OutputStream) throws -> Int32 {
        // `--version` among the options before any command word (`coven --json --version`).
        if words.prefix(while: { $0.hasPrefix("-") && $0 != "-" && $0 != "--" }).contains("--version") {
            out.write("coven \(version)\n")
            return ExitCodes.success
        }
        let (globals, rest) = try Parser.splitLeadingGlobals(words)
        guard let name = rest.first else {
            let leading = try Parser.parse(globals, options: [], arguments: [], command: "")
            guard leading.has("help") else {
                throw CovenError(.usage, "no command given", hint: "see 'coven --help'")
            }
            out.write(Help.overview())
            return ExitCodes.success
        }
        if name == "help" {
            return try help(Array(rest.dropFirst()), out: out)
        }
        guard let command = CommandRegistry.find(name) else {
            let known = CommandRegistry.all.map { $0.name } + ["help"]
            let hint = Parser.suggestion(for: name, among: known).map { "did you mean '\($0)'?" } ?? "see 'coven --help'"
            throw CovenError(.usage, "'\(name)' is not a coven command", hint: hint)
        }
        let invocation = try Parser.parse(globals + rest.dropFirst(), options: command.options, arguments: command.arguments, command: command.name)
        if invocation.has("help") {
            out.write(Help.render(command))
            return ExitCodes.success
        }
        try refuseUndecodable(invocation, command)
        if invocation.value("db")?.isEmpty == true {
            // An empty word is a mistake (an unset variable in `--db "$DB"`), never the default.
            throw CovenError(.usage, "option '--db' takes a path, not an empty word", hint: "leave --db out to use COVEN_DB or the default")
        }
        installSignalHandlers(command, json: invocation.has("json"))
        let context = CommandContext(
            databasePath: DevicePaths.databasePath(option: invocation.value("db"), environment: environment),
            json: invocation.has("json"), quiet: invocation.has("quiet"), noWait: invocation.has("no-wait"),
            environment: environment, out: out, err: err)
        return try command.run(invocation, context)
    }

    /// The one signal handling every command runs under: SIGINT, SIGTERM and SIGHUP stop it
    /// with status 130 and the error `interrupted` (docs/exit-codes.md).
    private static func installSignalHandlers(_ command: Command.Type, json: Bool) {
        let message = "a signal stopped 'coven \(command.name)'"
        let error = CovenError(.interrupted, message)
        let line = json
            ? ((try? JSONText.render(["error": error.code.rawValue, "message": message, "exit_code": Int(ExitCodes.interrupted)])) ?? "{\"error\":\"interrupted\"}")
            : "coven: error: \(error.code.rawValue): \(message)"
        // A command that does not stop in time (a read no signal interrupts) is ended by the
        // watchdog, saying which signal and why it did not stop by itself.
        let forced: @Sendable (String) -> String = { signal in
            let text = "interrupted by \(signal): 'coven \(command.name)' did not stop in time (a storage read or a lock that does not end)"
            return json
                ? ((try? JSONText.render(["error": "interrupted", "message": text, "exit_code": Int(ExitCodes.interrupted)])) ?? "{\"error\":\"interrupted\"}") + "\n"
                : "coven: error: interrupted: " + text + "\n"
        }
        Stop.installSignalHandlers(cooperative: command.pollsStop, message: line + "\n", forcedMessage: forced)
    }

    /// Refuses words that are not valid UTF-8 where coven needs text (SQL, a namespace, a URL,
    /// the `--db` path, which SQLite and the folder beside it take as text). Paths coven opens
    /// by their bytes (`--user PATH`, `stage PATH`, `--manifest FILE`) keep any bytes.
    private static func refuseUndecodable(_ invocation: Invocation, _ command: Command.Type) throws {
        func keepsBytes(_ completion: Completion) -> Bool { completion == .file || completion == .directory }
        func refuse(_ what: String, _ value: String) -> CovenError {
            CovenError(.usage, "\(what) is not valid UTF-8: '\(PathText.display(value))'", hint: "only paths of files coven reads may hold other bytes")
        }
        for (long, values) in invocation.options {
            let spec = command.options.first { $0.long == long }
            let keeps = long != "db" && spec.map { keepsBytes($0.completion) } == true
            for value in values where !keeps && PathText.hasUndecodableBytes(value) {
                throw refuse("option '--\(long)'", value)
            }
        }
        for (index, argument) in invocation.arguments.enumerated() where PathText.hasUndecodableBytes(argument) {
            let spec = index < command.arguments.count ? command.arguments[index] : command.arguments.last
            guard let spec, keepsBytes(spec.completion) else { throw refuse("argument \(spec?.name ?? String(index + 1))", argument) }
        }
    }

    /// `coven help` (the overview) and `coven help COMMAND`, both on stdout.
    private static func help(_ words: [String], out: OutputStream) throws -> Int32 {
        let topic = ArgumentSpec("COMMAND", help: "a command", optional: true)
        let invocation = try Parser.parse(words, options: [], arguments: [topic], command: "help")
        guard let name = invocation.arguments.first else {
            out.write(Help.overview())
            return ExitCodes.success
        }
        guard let command = CommandRegistry.all.first(where: { $0.name == name }) else {
            let hint = Parser.suggestion(for: name, among: CommandRegistry.all.map { $0.name }).map { "did you mean '\($0)'?" }
            throw CovenError(.usage, "'\(name)' is not a coven command", hint: hint ?? "see 'coven --help'")
        }
        out.write(Help.render(command))
        return ExitCodes.success
    }

    /// Writes an error as `coven: error: CODE: message[: cause]` (+ `coven: hint: …`), or as one
    /// JSON object on one line (docs/json.md, "Errors").
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
