package ingest.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Ascending$;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.RightOuter$;
import org.apache.spark.sql.catalyst.plans.logical.BROADCAST$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.HintInfo;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Repartition;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.internal.SQLConf;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Lets a copy-on-write Delta MERGE write the rows it leaves unchanged straight from its files.
 *
 * <p>After MergeBroadcastJoin, such a MERGE's write joins the target's rows to the broadcast batch by a
 * right outer join, and every joined row goes through Delta's output: a CASE per column over the
 * merge's clauses and, where the table records the change data feed, each row packed into an array of
 * structs and exploded twice (MergeOutputGeneration). A target row no batch row matches comes out as
 * it went in, with no change-feed type. With 1,000 changes into 10M rows that is every row but 1,000.
 *
 * <p>This rule splits them off: Delta's output over an inner join (the matched rows) and over the
 * batch's rows that match none, and, as another branch of a union, the target's rows that no batch
 * row matches (an anti-join against the batch's keys, broadcast), their columns as they are and
 * Delta's count of copied rows taken for each. The rows are those Delta's output would write. The
 * matched rows, a few from each file, are joined in one task and sorted by the condition's target
 * columns, so they make one small file in key order. A task's unchanged rows keep their files' order;
 * lake/merge.py has the scans open one file a task, since a task that read several would write their
 * rows, fewer than a file held, into files spanning them.
 *
 * <p>That holds only for a MERGE without a WHEN NOT MATCHED BY SOURCE clause, which would change rows
 * no batch row matches, and the plan does not tell its clauses apart. So the rule applies only where
 * the session's {@code spark.ingest.mergeCopyRows.enabled} is true, which the project sets around such
 * a MERGE alone (lake/merge.py), and only to a plan of Delta's shape: projections, filters and
 * generators over MergeBroadcastJoin's union, whose output is the target's columns by name and type
 * (with the feed's {@code _change_type}), and one count of copied rows.
 */
public final class MergeCopyRows extends Rule<LogicalPlan> {
    public static final String ENABLED = "spark.ingest.mergeCopyRows.enabled";
    static final String CHANGE_TYPE = "_change_type"; // Delta's CDCReader.CDC_TYPE_COLUMN_NAME
    static final String CDC_PARTITION = "__is_cdc"; // CDCReader.CDC_PARTITION_COL: _change_type is not null
    static final String COPIED_METRIC = "number of target rows rewritten unmodified"; // numTargetRowsCopied
    static final String INCREMENT_METRIC = "org.apache.spark.sql.delta.metric.IncrementMetric";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!Boolean.parseBoolean(SQLConf.get().getConfString(ENABLED, "false"))) {
            return plan;
        }
        try {
            LogicalPlan rewritten = rewrite(plan);
            return rewritten == null ? plan : rewritten;
        } catch (LinkageError | ReflectiveOperationException e) {
            return plan;
        }
    }

    /** `root` with its unchanged target rows in a branch of their own; null where the rule does not apply. */
    static LogicalPlan rewrite(LogicalPlan root) throws ReflectiveOperationException {
        List<LogicalPlan> chain = new ArrayList<>();
        LogicalPlan node = root;
        while (node instanceof Project || node instanceof Filter || node instanceof Generate) {
            chain.add(node);
            node = node.children().head();
        }
        if (chain.isEmpty() || !(node instanceof Union union) || union.children().size() != 2
                || !(union.children().head() instanceof Join join) || !broadcastRightOuter(join)) {
            return null;
        }
        LogicalPlan batch = join.left(), target = join.right();
        Expression copied = null;
        for (LogicalPlan step : chain) {
            for (Expression e : CollectionConverters.asJava(step.expressions())) {
                Expression found = copiedCount(e);
                if (found != null && copied != null && metric(found) != metric(copied)) {
                    return null; // two counts: not the shape this rule knows
                }
                copied = found == null ? copied : found;
            }
        }
        LogicalPlan keys = MergeBroadcastJoin.uncounted(batch);
        if (copied == null || keys == null) {
            return null;
        }
        List<NamedExpression> columns = new ArrayList<>();
        for (Attribute out : CollectionConverters.asJava(root.output())) {
            Attribute column = MergeBroadcastJoin.column(target, out.name());
            if (out.name().equals(CHANGE_TYPE) && column == null) { // a copied row is no change
                columns.add(MergeBroadcastJoin.alias(Literal.create(null, out.dataType()), out.name(), newId()));
            } else if (out.name().equals(CDC_PARTITION) && column == null) { // and so goes to the data files
                columns.add(MergeBroadcastJoin.alias(Literal.FalseLiteral(), out.name(), newId()));
            } else if (column != null && column.dataType().sameType(out.dataType())) {
                columns.add(MergeBroadcastJoin.alias(column, out.name(), newId()));
            } else {
                return null; // a column the target lacks (schema evolution) or holds in another type
            }
        }
        Expression on = join.condition().get();
        Option<HintInfo> none = Option.empty();
        Option<HintInfo> broadcast = Option.apply(new HintInfo(Option.apply(BROADCAST$.MODULE$)));
        LogicalPlan unmatched = new Join(target, MergeBroadcastJoin.only(keys, on), LeftAnti$.MODULE$, join.condition(),
                new JoinHint(none, broadcast));
        LogicalPlan copy = new Project(CollectionConverters.asScala(columns).toList(),
                new Filter(new Not(copied), unmatched)); // Delta's count of copied rows, false for each
        // the changed rows of every file in one task, in key order: one small file a merge, not one a file
        LogicalPlan matched = new Sort(CollectionConverters.asScala(keyOrder(on, target)).toList(), false,
                new Repartition(1, false, new Join(batch, target, Inner$.MODULE$, join.condition(), join.hint())),
                Option.empty());
        LogicalPlan changed = union.withNewChildren(CollectionConverters.asScala(
                List.of(matched, union.children().last())).toList());
        for (int i = chain.size() - 1; i >= 0; i--) {
            changed = chain.get(i).withNewChildren(CollectionConverters.asScala(List.of(changed)).toList());
        }
        return new Union(CollectionConverters.asScala(List.of(changed, copy)).toList(), false, false);
    }

    /** Ascending on the target's columns that `on` reads, in the order it reads them. */
    static List<SortOrder> keyOrder(Expression on, LogicalPlan target) {
        List<SortOrder> order = new ArrayList<>();
        List<Attribute> seen = new ArrayList<>();
        collectTargetColumns(on, target, seen);
        for (Attribute a : seen) {
            order.add(new SortOrder(a, Ascending$.MODULE$, Ascending$.MODULE$.defaultNullOrdering(),
                    scala.collection.immutable.List$.MODULE$.empty()));
        }
        return order;
    }

    static void collectTargetColumns(Expression e, LogicalPlan target, List<Attribute> seen) {
        if (e instanceof Attribute a && target.outputSet().contains(a) && !seen.contains(a)) {
            seen.add(a);
        }
        for (Expression child : CollectionConverters.asJava(e.children())) {
            collectTargetColumns(child, target, seen);
        }
    }

    /** MergeBroadcastJoin's right outer join of the batch (broadcast) and the target. */
    static boolean broadcastRightOuter(Join j) {
        return j.joinType() == RightOuter$.MODULE$ && j.condition().isDefined() && j.hint().leftHint().isDefined()
                && MergeBroadcastJoin.hasColumn(j.left(), MergeBroadcastJoin.SOURCE_PRESENT)
                && MergeBroadcastJoin.hasColumn(j.right(), MergeBroadcastJoin.TARGET_PRESENT);
    }

    /** Delta's count of copied rows (an IncrementMetric of numTargetRowsCopied) within `e`, or null. */
    static Expression copiedCount(Expression e) throws ReflectiveOperationException {
        if (e.getClass().getName().equals(INCREMENT_METRIC)) {
            SQLMetric metric = metric(e);
            if (metric.name().isDefined() && metric.name().get().equals(COPIED_METRIC)) {
                return e;
            }
        }
        for (Expression child : CollectionConverters.asJava(e.children())) {
            Expression found = copiedCount(child);
            if (found != null) {
                return found;
            }
        }
        return null;
    }

    static SQLMetric metric(Expression incrementMetric) throws ReflectiveOperationException {
        return (SQLMetric) incrementMetric.getClass().getMethod("metric").invoke(incrementMetric);
    }

    static org.apache.spark.sql.catalyst.expressions.ExprId newId() {
        return NamedExpression$.MODULE$.newExprId();
    }
}
