package ingest.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.FullOuter$;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.LeftSemi$;
import org.apache.spark.sql.catalyst.plans.RightOuter$;
import org.apache.spark.sql.catalyst.plans.logical.BROADCAST$;
import org.apache.spark.sql.catalyst.plans.logical.HintInfo;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.internal.SQLConf;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Lets a copy-on-write Delta MERGE with an insert clause join its batch by broadcast.
 *
 * <p>Such a MERGE joins the batch (left) to every row of the files it rewrites (right) with a full
 * outer join (ClassicMergeExecutor.writeAllChanges). Spark cannot broadcast a full outer join, so the
 * table's rows were shuffled: for a small batch into a large table most of a merge's reading time, and
 * the rewritten files came out in the join's hash order instead of the key order they had.
 *
 * <p>A full outer join is its right outer join plus the left rows no right row matches. This rule
 * writes it so: the right outer join with the batch broadcast (the table's rows stream through in
 * file order), and, as a second branch of a union, the batch's rows that match none of the table's,
 * with the table's columns null. That branch finds them without shuffling the table either: the
 * table's rows that some batch row matches (a semi-join against the broadcast batch, reading only the
 * columns the condition needs), then the batch's rows that none of those match. Rows, columns and
 * their order are the full outer join's.
 *
 * <p>Delta counts the batch's rows in its second pass by a nondeterministic column
 * ({@code _source_row_present_}) and fails or warns if the count differs from its first pass, so
 * the second branch reads the batch with that column set to true instead: each row is counted
 * once. The rule applies only where the batch's estimated size is within
 * {@code spark.sql.autoBroadcastJoinThreshold} and both sides are otherwise deterministic (Delta's
 * row indexes for deduplicating a feed's deletes are not). It runs among the pre-CBO rules, after
 * Delta's PrepareDeltaScan, so that a batch read from a Delta table (bronze's partition) is estimated
 * by the files it reads, not by the whole table. {@code spark.ingest.mergeBroadcastJoin.enabled}
 * false turns it off for a session.
 */
public final class MergeBroadcastJoin extends Rule<LogicalPlan> {
    public static final String ENABLED = "spark.ingest.mergeBroadcastJoin.enabled";
    static final String SOURCE_PRESENT = "_source_row_present_"; // MergeIntoCommandBase.SOURCE_ROW_PRESENT_COL
    static final String TARGET_PRESENT = "_target_row_present_"; // and TARGET_ROW_PRESENT_COL

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return Rewrites.up(plan, ENABLED, node -> node instanceof Join j && mergeJoin(j), node -> {
            LogicalPlan rewritten = rewrite((Join) node);
            return rewritten == null ? node : rewritten;
        });
    }

    /** A merge's full outer join of its batch (left) and the target's rows (right). */
    static boolean mergeJoin(Join j) {
        return j.joinType() == FullOuter$.MODULE$ && j.condition().isDefined() && j.hint().equals(JoinHint.NONE())
                && hasColumn(j.left(), SOURCE_PRESENT) && hasColumn(j.right(), TARGET_PRESENT);
    }

    /** The join as a union of a broadcast right outer join and the unmatched batch rows; null where
     * the rule does not apply. */
    static LogicalPlan rewrite(Join join) {
        LogicalPlan batch = join.left(), target = join.right();
        long threshold = SQLConf.get().autoBroadcastJoinThreshold();
        if (threshold < 0 || batch.stats().sizeInBytes().compare(scala.math.BigInt.apply(threshold)) > 0) {
            return null;
        }
        LogicalPlan uncounted = uncounted(batch);
        if (uncounted == null || !uncounted.deterministic() || !target.deterministic()) {
            return null;
        }
        HintInfo broadcast = new HintInfo(Option.apply(BROADCAST$.MODULE$));
        Option<HintInfo> none = Option.empty();
        LogicalPlan matchedOrCopied = new Join(batch, target, RightOuter$.MODULE$, join.condition(),
                new JoinHint(Option.apply(broadcast), none));
        // the semi-join reads only what the condition needs of each side (this rule runs after the optimizer's
        // column pruning, among the pre-CBO rules)
        LogicalPlan matchedTarget = new Join(only(target, join.condition().get()), only(uncounted, join.condition().get()),
                LeftSemi$.MODULE$, join.condition(), new JoinHint(none, Option.apply(broadcast)));
        LogicalPlan unmatchedBatch = new Join(uncounted, matchedTarget, LeftAnti$.MODULE$, join.condition(),
                JoinHint.NONE());
        List<NamedExpression> columns = new ArrayList<>();
        for (Attribute a : CollectionConverters.asJava(unmatchedBatch.output())) {
            columns.add(a);
        }
        for (Attribute a : CollectionConverters.asJava(target.output())) {
            columns.add(alias(Literal.create(null, a.dataType()), a.name(), NamedExpression$.MODULE$.newExprId()));
        }
        LogicalPlan inserted = new Project(CollectionConverters.asScala(columns).toList(), unmatchedBatch);
        List<LogicalPlan> branches = List.of(matchedOrCopied, inserted);
        return new Union(CollectionConverters.asScala(branches).toList(), false, false);
    }

    /**
     * The batch with Delta's row counter set to true under a new id (so the two branches never share
     * an attribute that means two things); null if the batch has no such column.
     */
    static LogicalPlan uncounted(LogicalPlan batch) {
        ExprId[] counted = {null};
        ExprId fresh = NamedExpression$.MODULE$.newExprId();
        LogicalPlan out = batch.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
            @Override
            public boolean isDefinedAt(LogicalPlan node) {
                return true;
            }

            @Override
            public LogicalPlan apply(LogicalPlan node) {
                return node.transformExpressionsUp(new AbstractPartialFunction<Expression, Expression>() {
                    @Override
                    public boolean isDefinedAt(Expression e) {
                        return (e instanceof Alias a && a.name().equals(SOURCE_PRESENT) && !a.child().deterministic())
                                || (counted[0] != null && e instanceof AttributeReference r
                                    && r.exprId().equals(counted[0]));
                    }

                    @Override
                    public Expression apply(Expression e) {
                        if (e instanceof Alias a && a.name().equals(SOURCE_PRESENT) && !a.child().deterministic()) {
                            counted[0] = a.exprId();
                            return alias(Literal.TrueLiteral(), a.name(), fresh);
                        }
                        if (e instanceof AttributeReference r && counted[0] != null && r.exprId().equals(counted[0])) {
                            return r.withExprId(fresh);
                        }
                        return e;
                    }
                });
            }
        });
        return counted[0] == null ? null : out;
    }

    /** `plan`'s columns that `condition` reads, alone. */
    static LogicalPlan only(LogicalPlan plan, Expression condition) {
        List<NamedExpression> read = new ArrayList<>();
        for (Attribute a : CollectionConverters.asJava(plan.output())) {
            if (condition.references().contains(a)) {
                read.add(a);
            }
        }
        return new Project(CollectionConverters.asScala(read).toList(), plan);
    }

    static boolean hasColumn(LogicalPlan plan, String name) {
        return column(plan, name) != null;
    }

    /** `plan`'s output column named `name`, or null. */
    static Attribute column(LogicalPlan plan, String name) {
        for (Attribute a : CollectionConverters.asJava(plan.output())) {
            if (a.name().equals(name)) {
                return a;
            }
        }
        return null;
    }

    static Alias alias(Expression child, String name, ExprId id) {
        return new Alias(child, name, id, scala.collection.immutable.List$.MODULE$.empty(), Option.empty(),
                scala.collection.immutable.List$.MODULE$.empty());
    }
}
