import Foundation

/// One file to bring back into the folder, with its path under it as the app gave it.
public struct DeviceOnlyRequest: Sendable, Equatable {
    /// The file's id.
    public var file: String
    /// The names of its path under the folder, outermost first, each one name whatever it
    /// holds (`AC/DC` is one name).
    public var names: [String]
    /// Where it came from, for errors: `argument 2`, `line 3`.
    public var input: String
    /// The path as it was given, for errors: `REL/PATH` of an argument, or the names as a JSON
    /// array.
    public var given: String

    /// Creates a request.
    public init(file: String, names: [String], input: String, given: String? = nil) {
        self.file = file
        self.names = names
        self.input = input
        self.given = given ?? DeviceOnlyRequest.arrayText(names)
    }

    static func arrayText(_ names: [String]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: names.map { PathText.text(PathText.osBytes($0)) }, options: [.withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses an argument `FILE=REL/PATH`, where `/` separates names.
    ///
    /// - Parameters:
    ///   - argument: the argument.
    ///   - position: its position among the arguments, 1-based, for errors.
    /// - Throws: `.usage` without `=`; `.empty` for an empty path or name.
    public static func argument(_ argument: String, position: Int) throws -> DeviceOnlyRequest {
        let input = "argument \(position)"
        guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
            throw CovenError(.usage, "\(input) '\(argument)' is not FILE=REL/PATH", details: ["input": input])
        }
        let file = String(argument[..<equals])
        let path = String(argument[argument.index(after: equals)...])
        let names = path.isEmpty ? [] : path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let request = DeviceOnlyRequest(file: file, names: names, input: input, given: path)
        try request.checkNotEmpty()
        return request
    }

    /// Parses a line of stdin: `FILE<TAB>NAME<TAB>NAME…`, each field one name.
    ///
    /// - Throws: `.usage` for a line without a file; `.empty` for no name or an empty one.
    public static func tabLine(_ line: String, number: Int) throws -> DeviceOnlyRequest {
        let input = "line \(number)"
        let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard let file = fields.first, !file.isEmpty else {
            throw CovenError(.usage, "\(input) does not start with a file id", details: ["input": input])
        }
        let request = DeviceOnlyRequest(file: file, names: Array(fields.dropFirst()), input: input)
        try request.checkNotEmpty()
        return request
    }

    /// Parses a JSON line: `{"file": FILE, "path": ["AC/DC", "Back in Black.flac"]}`.
    ///
    /// - Throws: `.usage` for anything else; `.empty` for no name or an empty one.
    public static func jsonLine(_ line: String, number: Int) throws -> DeviceOnlyRequest {
        let input = "line \(number)"
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw CovenError(.usage, "\(input) is not a JSON object", hint: "write {\"file\": FILE, \"path\": [NAME, ...]}", details: ["input": input])
        }
        for key in object.keys where key != "file" && key != "path" {
            throw CovenError(.usage, "\(input) has an unknown key '\(key)'", details: ["input": input])
        }
        guard let file = object["file"] as? String, !file.isEmpty else {
            throw CovenError(.usage, "\(input) needs \"file\": a file id", details: ["input": input])
        }
        guard let names = object["path"] as? [String] else {
            throw CovenError(.usage, "\(input) needs \"path\": an array of names", details: ["input": input])
        }
        let request = DeviceOnlyRequest(file: file, names: names, input: input)
        try request.checkNotEmpty()
        return request
    }

    /// Refuses a path with no names or an empty one.
    ///
    /// - Throws: `.empty`.
    public func checkNotEmpty() throws {
        guard !names.isEmpty, !names.contains(where: \.isEmpty) else {
            throw CovenError(.empty, "\(input): the path '\(given)' of file '\(file)' \(names.isEmpty ? "has no name" : "has an empty name")",
                             details: ["input": input, "file": file, "path": given])
        }
    }
}
