import CovenKit
import Foundation

/// `coven pin`: keep files offline.
struct PinCommand: Command {
    static let name = "pin"
    static let abstract = "keep files on this device, outside the cache budget"
    static let synopsis = ["FILE..."]
    static let discussion = """
    Marks the files kept: their cached bytes stay outside the budget and no trim or 'cache \
    clear' takes them. Pinning fetches nothing; 'coven fetch-kept' fetches every kept file not \
    held. Pinning a pinned file changes nothing. Prints the ids newly pinned, one a line.
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("FILE", help: "file ids", repeating: true, completion: .fileID)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        try KeptFilesChange.run(invocation, context, listedAs: "pinned") { try KeptFiles($0).pin($1) }
    }
}
