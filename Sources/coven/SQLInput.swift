import CovenKit
import Foundation

/// The SQL of `coven sql` and `coven write`: an argument, or stdin when it is `-` (or absent
/// and stdin is not a terminal), with `--param NAME=VALUE` bindings (`:NAME`, `@NAME`, `$NAME`).
enum SQLInput {
    static func read(_ invocation: Invocation, _ context: CommandContext) throws -> (sql: String, parameters: [String: SQLValue]) {
        var sql: String
        if let argument = invocation.arguments.first, argument != "-" {
            sql = argument
        } else {
            guard invocation.arguments.first == "-" || !context.stdinIsTerminal else {
                throw CovenError(.usage, "missing SQL", hint: "pass it as an argument, or - to read it from stdin")
            }
            let data = FileHandle.standardInput.readDataToEndOfFile()
            // SQLite would stop at a NUL and run only what comes before it.
            if let index = data.firstIndex(of: 0) {
                throw CovenError(.usage, "the SQL on stdin holds a NUL byte (at byte \(index - data.startIndex))", hint: "SQL is text: pass the bytes with --param or as a blob literal")
            }
            sql = String(decoding: data, as: UTF8.self)
        }
        sql = sql.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !sql.isEmpty else { throw CovenError(.usage, "the SQL is empty") }
        return (sql, try parameters(invocation))
    }

    /// The --param values, by name.
    static func parameters(_ invocation: Invocation) throws -> [String: SQLValue] {
        var parameters: [String: SQLValue] = [:]
        for pair in invocation.values("param") {
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
                throw CovenError(.usage, "--param takes NAME=VALUE, not '\(pair)'")
            }
            var name = String(pair[..<equals])
            if let first = name.first, ":@$".contains(first) { name.removeFirst() }
            // Two values for one name: neither is silently dropped.
            guard parameters[name] == nil else {
                throw CovenError(.usage, "--param '\(name)' is given twice", hint: "give each name one value")
            }
            parameters[name] = .text(String(pair[pair.index(after: equals)...]))
        }
        return parameters
    }
}
