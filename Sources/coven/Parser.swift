import CovenKit
import Foundation

// MARK: - Global options

/// Options every command takes, parsed wherever they appear before `--`.
enum GlobalOptions {
    static let specs: [OptionSpec] = [
        OptionSpec("db", value: "PATH", help: "the device database (default: $COVEN_DB, else $XDG_DATA_HOME/coven/device.db)", completion: .file),
        OptionSpec("json", help: "print data and errors as JSON"),
        OptionSpec("quiet", short: "q", help: "print nothing but data and errors"),
        OptionSpec("no-wait", help: "fail with 'busy' instead of waiting for another coven on this device"),
        OptionSpec("help", short: "h", help: "show this help"),
    ]
}

// MARK: - The parser

/// Parses a command's words against its option table.
///
/// Long options take `--name value` or `--name=value`; short ones `-x value`, `-xVALUE`, and
/// flags bundle (`-zq`). `--` ends options; a lone `-` is an argument (stdin).
enum Parser {
    static func parse(_ words: [String], options: [OptionSpec], arguments: [ArgumentSpec], command: String) throws -> Invocation {
        let table = options + GlobalOptions.specs
        var invocation = Invocation()
        var index = 0
        var optionsEnded = false
        func spec(long: String) throws -> OptionSpec {
            guard let spec = table.first(where: { $0.long == long }) else {
                throw CovenError(.usage, "unknown option '--\(long)'", hint: "see 'coven \(command) --help'")
            }
            return spec
        }
        func add(_ spec: OptionSpec, _ value: String) throws {
            if !spec.repeatable, spec.value != nil, invocation.options[spec.long] != nil,
               invocation.options[spec.long]?.last != value {
                throw CovenError(.usage, "option '--\(spec.long)' is given twice")
            }
            if !spec.choices.isEmpty, !spec.choices.contains(value) {
                throw CovenError(.usage, "option '--\(spec.long)' takes \(spec.choices.map { "'\($0)'" }.joined(separator: " or ")), not '\(value)'")
            }
            invocation.options[spec.long, default: []].append(value)
        }
        while index < words.count {
            let word = words[index]
            index += 1
            if optionsEnded || word == "-" || !word.hasPrefix("-") {
                invocation.arguments.append(word)
                continue
            }
            if word == "--" {
                optionsEnded = true
                continue
            }
            if word.hasPrefix("--") {
                let body = word.dropFirst(2)
                let name: String
                var inline: String?
                if let equals = body.firstIndex(of: "=") {
                    name = String(body[..<equals])
                    inline = String(body[body.index(after: equals)...])
                } else {
                    name = String(body)
                }
                let spec = try spec(long: name)
                if spec.value == nil {
                    if inline != nil { throw CovenError(.usage, "option '--\(name)' takes no value") }
                    try add(spec, "")
                } else if let inline {
                    try add(spec, inline)
                } else {
                    guard index < words.count else {
                        throw CovenError(.usage, "option '--\(name)' needs a value (\(spec.value ?? "VALUE"))")
                    }
                    try add(spec, words[index])
                    index += 1
                }
                continue
            }
            // Short options, possibly bundled.
            var letters = Substring(word.dropFirst())
            while let letter = letters.first {
                letters = letters.dropFirst()
                guard let spec = table.first(where: { $0.short == String(letter) }) else {
                    throw CovenError(.usage, "unknown option '-\(letter)'", hint: "see 'coven \(command) --help'")
                }
                if spec.value == nil {
                    try add(spec, "")
                    continue
                }
                if !letters.isEmpty {
                    try add(spec, String(letters))
                } else {
                    guard index < words.count else {
                        throw CovenError(.usage, "option '-\(letter)' needs a value (\(spec.value ?? "VALUE"))")
                    }
                    try add(spec, words[index])
                    index += 1
                }
                break
            }
        }
        if invocation.has("help") { return invocation }
        // Check the positional arguments against the declaration.
        let required = arguments.filter { !$0.optional }.count
        let repeating = arguments.contains { $0.repeating }
        if invocation.arguments.count < required {
            let missing = arguments.filter { !$0.optional }[invocation.arguments.count]
            throw CovenError(.usage, "missing argument \(missing.name)", hint: "see 'coven \(command) --help'")
        }
        if !repeating && invocation.arguments.count > arguments.count {
            throw CovenError(.usage, "unexpected argument '\(invocation.arguments[arguments.count])'", hint: "see 'coven \(command) --help'")
        }
        for (position, value) in invocation.arguments.enumerated() {
            let spec = arguments[min(position, arguments.count - 1)]
            if !spec.choices.isEmpty && !spec.choices.contains(value) {
                throw CovenError(.usage, "\(spec.name) takes \(spec.choices.map { "'\($0)'" }.joined(separator: " or ")), not '\(value)'")
            }
        }
        return invocation
    }
}
