import CovenKit
import Foundation

/// `coven write`: one transaction of app SQL with coven's write functions.
struct WriteCommand: Command {
    static let name = "write"
    static let abstract = "run one transaction of app SQL that may put files in rows"
    static let synopsis = ["[SQL | -] [--param NAME=VALUE]..."]
    static let discussion = """
    Runs the SQL (an argument, or stdin when it is - or absent) as one transaction, with coven's \
    SQL functions: coven_put_staged(STAGED), coven_put_user_file([NAMESPACE,] PREPARED [, PLACE]), \
    coven_existing_file(FILE), coven_stamp() and coven_uuid7(). Before it commits, every file \
    reference is checked (file_unknown, file_unreferenced, file_write_once, bound_file_too_large, \
    namespace_kind, device_only), every synced row it changed is stamped, and the write is \
    recorded for publishing. A failed write changes nothing; staged files stay staged. Prints \
    the ids of the files it made, one a line.
    """
    static let options = [
        OptionSpec("param", short: "p", value: "NAME=VALUE", help: "bind :NAME in the SQL to VALUE (text)", repeatable: true),
    ]
    static let arguments = [ArgumentSpec("SQL", help: "the SQL to run, or - for stdin", optional: true)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let (sql, parameters) = try SQLInput.read(invocation, context)
        let device = try context.openDevice()
        let result = try device.write(sql: sql, parameters: parameters, wait: !context.noWait)
        if let removed = try StoreSync(device).removedAt() {
            context.note("warning: this device was removed from the store at \(removed): this write stays here and will never be published")
            context.note("hint: make a new device with 'coven join'")
        }
        if context.json {
            try context.printJSON([
                "files": result.files,
                "staged": result.staged,
                "move": result.move.map { $0 as Any } ?? NSNull(),
                "rows": result.rows.map(SQLCommand.jsonObject),
            ])
        } else {
            result.files.forEach(context.line)
        }
        return 0
    }
}
